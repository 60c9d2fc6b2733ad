/* replication.c -- replicas in cluster mode: the primary's records streamed
 * to them, writes acknowledged only once replicas have them, and the data
 * side of failover.
 *
 * What flows is the append-only log's records (aofformat.c), not commands:
 * the state of each key a command changed (RESTORE with the value's bytes
 * and metadata, PLACED for an object held in client segments, or DEL),
 * FLUSHALL, and client segments' SEGMENT and SEGMENT.GONE, made by the
 * same functions the log uses (aofCatKeyState, aofSegmentMounted). So a
 * replica needs no placement, eviction or
 * expiry decisions of its own to end up equal, the pool's bytes travel
 * with their keys, and the log's reader checks every record (length and
 * CRC64) before the replica applies it. Like the log, the primary collects
 * the keys that changed (multi.h's list, shared with the log) and writes
 * their records in beforeSleep, before any reply of the iteration goes out.
 * A value of 256 KiB or more is not copied into the records: each
 * replica's reply chain references its pool extent (the version kept
 * until written, as a GET's large reply does) while that replica has less
 * than a sixteenth of the pool queued; a replica further behind gets
 * copies, so it can never hold the pool's space and fail writes. The
 * backlog keeps its own copy. With the CRC64 folded by carry-less
 * multiplies (crc.c) and the records buffer kept warm, 1 MiB SETs reach a
 * replica at about 1 GB/s here (BENCHMARKS.md).
 *
 * The link. The replica connects to its primary's client port and sends
 * AUTH [masteruser] masterauth when masterauth is set (the primary may
 * have requirepass or ACL users, as Redis's), REPLCONF node-id, REPLCONF
 * listening-port and PSYNC; the primary answers
 * "+FULLRESYNC <replid> <offset>", then "$EOF <keys>" and a snapshot (FLUSHALL,
 * the client segments, one record per key, a slice of the keyspace per
 * event-loop iteration with the live records of the changes made meanwhile
 * between the slices, the objects held for hosts not yet back, and
 * "+SNAPSHOT-END <offset>": psyncCommand says why that is exact), then
 * the live records. Offsets count the live stream's bytes (Redis's
 * master_repl_offset); the replica applies records as they arrive and
 * sends REPLCONF ACK <offset> after each batch and once a second. A
 * replica refuses writes (keys: MOVED to its primary; others: -READONLY)
 * and serves reads of its primary's slots to READONLY clients, as Redis
 * does.
 *
 * Partial resync, as Redis's PSYNC. The primary keeps the last
 * repl-backlog-size bytes of the live stream in a ring (from its first
 * replica on; freed after repl-backlog-ttl without replicas, with a new
 * replid, because the stream stops there). A replica that loses its link
 * sends PSYNC <replid> <applied + 1>; the primary answers +CONTINUE and
 * only the missing bytes when that history is its own and the byte is
 * still in the ring, else a full sync. A replica keeps a ring of the
 * stream it received too, and when promoted keeps its old primary's replid
 * as replid2, good up to the offset it had: that primary's other replicas
 * continue from it instead of copying everything (Redis 4+). A node that
 * becomes a replica after being a primary discards what it holds (it may
 * contain writes its successor lacks) and syncs in full, unless it handed
 * its slots over in a planned failover and changed nothing since its
 * successor acknowledged its whole stream: then it continues too.
 * While a backlog exists the primary builds records even with no replica
 * connected, so the stream (and its offsets) never skip a write.
 *
 * cluster-replica-ack yes: a client whose command changed a key has its
 * replies held (not written, its further input not read) until every
 * replica of this primary -- each one connected, and each one alive in etcd
 * (a replica syncing again counts) -- has acknowledged the offset that
 * covers the change; a pipeline's writes share one wait. A
 * primary without live replicas acknowledges at once (there is nobody to
 * fail over to). A wait longer than cluster-node-timeout closes the
 * connection: the client sees no acknowledgement, which is the truth.
 * Together with fencing (cluster_sync.c) and the promotion rules below,
 * nothing acknowledged is lost when a primary fails.
 *
 * Failover. A replica whose primary's alive key is gone (the lease
 * expired: cluster-node-timeout without a renewal) promotes itself with one
 * etcd transaction (cluster_sync.c "promote") that holds only while the
 * key stays absent and the primary's record is unchanged: one winner among
 * the replicas, config epoch above all. It must have completed a sync with
 * that primary and lost the link at most 10 node timeouts before (Redis's
 * replica validity factor); among several, the one with the highest offset
 * goes first (the ranking below). The old primary's record becomes a replica of
 * the winner, so when it comes back it discards its data and syncs.
 * CLUSTER FAILOVER (planned) asks the primary over the link: the primary
 * refuses writes with -TRYAGAIN, waits until the replica acknowledged its
 * whole stream, then hands over its slots (cluster_sync.c "handover").
 * FORCE and TAKEOVER promote without the primary.
 */
#include "replication.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "anet.h"
#include "aof.h"
#include "aofformat.h"
#include "cluster.h"
#include "detached.h"
#include "dict.h"
#include "dump.h"
#include "etcd.h"
#include "migrate.h"
#include "multi.h"
#include "notify.h"
#include "owner.h"
#include "prefetch.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

int replOn;

#define REPL_VALIDITY_FACTOR 10   /* link lost at most this many node timeouts ago */
#define REPL_READ_CHUNK (1024 * 1024)
/* Live records queued to one replica beyond its snapshot: a replica this far
 * behind is dropped (it syncs again), so a stalled one cannot take the
 * primary's memory, as Redis's replica output buffer limit. */
#define REPL_LINK_MAX_QUEUED (256LL * 1024 * 1024)
/* A full sync's slices (snapshotStep): at most this long each, and none
 * while this much is queued to the replica. */
#define REPL_SNAP_SLICE_US 1000
#define REPL_SNAP_QUEUE_MAX (8u * 1024 * 1024)
/* The most keys a replica sizes its keyspace for before a full sync's
 * records arrive (128 MiB of buckets); more grow as they come. */
#define REPL_PRESIZE_MAX (16LL * 1024 * 1024)

enum { LINK_NONE = 0, LINK_CONNECTING, LINK_HANDSHAKE, LINK_SNAPSHOT, LINK_STREAM };
static const char *linkStateName[] = {"none", "connect", "handshake", "sync", "connected"};

/* The primary's view of one replica connection (client->repl). */
typedef struct replicaLink {
    char node_id[CLUSTER_NAMELEN + 1];
    int port;
    long long ack;        /* last offset it acknowledged; -1 none yet */
    long long ack_ms;
    int online;           /* live records go to it (from its snapshot's first slice on) */
    size_t snap_len;      /* the snapshot's (or the backlog's) bytes, queued once: not "behind" */
    /* A full sync in progress (snapshotStep): the keyspace scanned a
     * slice per event-loop iteration. */
    int snapshotting;
    unsigned long cursor;        /* dictScan's over server.keys */
    long long snap_start_ms, snap_keys, snap_bytes, snap_byref, snap_slices, snap_longest_us;
} replicaLink;

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

static struct {
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
} repl = {.fd = -1, .state = LINK_NONE, .second_offset = -1, .snapshot_step_id = -1};

/* ---- the backlog --------------------------------------------------------- */

static long long streamEnd(void) {
    clusterNode *me = server.cluster ? server.cluster->myself : NULL;
    return me && clusterNodeIsReplica(me) ? repl.applied : repl.offset;
}

static long long backlogFirstByte(void) {
    return repl.backlog ? streamEnd() - repl.backlog->histlen + 1 : 0;
}

/* Empty, of repl-backlog-size; the next byte fed is the stream's next. */
static void backlogReset(void) {
    if (repl.backlog && repl.backlog->size != server.repl_backlog_size) {
        zfree(repl.backlog->buf);
        zfree(repl.backlog);
        repl.backlog = NULL;
    }
    if (!repl.backlog) {
        repl.backlog = zmalloc(sizeof(replBacklog));
        repl.backlog->size = server.repl_backlog_size;
        repl.backlog->buf = zmalloc((size_t)repl.backlog->size);
    }
    repl.backlog->idx = repl.backlog->histlen = 0;
}

static void backlogFree(void) {
    if (!repl.backlog) return;
    zfree(repl.backlog->buf);
    zfree(repl.backlog);
    repl.backlog = NULL;
}

/* Called with the bytes the stream's offset is about to advance by. */
static void backlogFeed(const char *p, size_t len) {
    replBacklog *b = repl.backlog;
    if (!b || len == 0) return;
    if ((long long)len > b->size) { /* only the tail can stay */
        p += len - (size_t)b->size;
        len = (size_t)b->size;
    }
    while (len) {
        size_t room = (size_t)(b->size - b->idx), n = len < room ? len : room;
        memcpy(b->buf + b->idx, p, n);
        b->idx = (b->idx + (long long)n) % b->size;
        b->histlen = b->histlen + (long long)n > b->size ? b->size : b->histlen + (long long)n;
        p += n;
        len -= n;
    }
}

/* The bytes from offset `from` (1-based, inside the backlog) to its end,
 * queued to c; returns how many. */
static long long backlogSend(client *c, long long from) {
    replBacklog *b = repl.backlog;
    long long skip = from - backlogFirstByte(), len = b->histlen - skip;
    long long pos = ((b->idx - b->histlen + skip) % b->size + b->size) % b->size;
    for (long long left = len; left > 0;) {
        long long n = left < b->size - pos ? left : b->size - pos;
        addReplyProto(c, b->buf + pos, (size_t)n);
        left -= n;
        pos = (pos + n) % b->size;
    }
    return len;
}

/* CONFIG SET repl-backlog-size: what fits of the history is kept. */
void replResizeBacklog(void) {
    replBacklog *old = repl.backlog;
    if (!old || old->size == server.repl_backlog_size) return;
    long long keep = old->histlen < server.repl_backlog_size ? old->histlen : server.repl_backlog_size;
    long long pos = ((old->idx - keep) % old->size + old->size) % old->size;
    repl.backlog = NULL;
    backlogReset();
    for (long long left = keep; left > 0;) {
        long long n = left < old->size - pos ? left : old->size - pos;
        backlogFeed(old->buf + pos, (size_t)n);
        left -= n;
        pos = (pos + n) % old->size;
    }
    zfree(old->buf);
    zfree(old);
}

/* A new history on this primary (Redis's shiftReplicationId when `keep`,
 * changeReplicationId otherwise): the old one stays good, as replid2, for
 * the offsets it had reached, so the siblings of a promoted replica
 * continue from it. */
static void newReplid(int keep) {
    if (keep) {
        memcpy(repl.replid2, repl.replid, sizeof(repl.replid2));
        repl.second_offset = repl.offset + 1;
    } else {
        repl.replid2[0] = '\0';
        repl.second_offset = -1;
    }
    getRandomHexChars(repl.replid, CLUSTER_NAMELEN);
    repl.replid[CLUSTER_NAMELEN] = '\0';
}

/* ---- hooks ------------------------------------------------------------- */

/* The client whose command changed a key has its replies held from now on
 * (CLIENT_REPL_WAIT); beforeSleep sets the offset they wait for. A client
 * held already (a relayed read let its pipeline go on) waits for the newer
 * offset. */
static void markWriter(void) {
    client *c = server.current_client;
    if (!server.cluster_replica_ack || c == NULL || c->repl || c->repl_marked) return;
    c->flags |= CLIENT_REPL_WAIT;
    c->repl_marked = 1;
    if (repl.nmarked == repl.marked_cap) {
        repl.marked_cap = repl.marked_cap ? repl.marked_cap * 2 : 16;
        repl.marked = zrealloc(repl.marked, repl.marked_cap * sizeof(client *));
    }
    repl.marked[repl.nmarked++] = c;
}

void replWriterSeen(void) { markWriter(); }

void replFlushedAll(void) {
    markWriter(); /* what changed before the flush went with it (signalFlushedDb) */
    if (!repl.buf) repl.buf = sdsempty();
    repl.buf = aofCatFlushall(repl.buf);
}

sds *replRecordBuf(void) {
    clusterNode *me = server.cluster ? server.cluster->myself : NULL;
    if (!replOn || me == NULL || clusterNodeIsReplica(me)) return NULL;
    if (!repl.buf) repl.buf = sdsempty();
    return &repl.buf;
}

long long replOffset(void) { return streamEnd(); }

/* ---- the primary's side -------------------------------------------------- */

static void removeClient(client **v, size_t *n, client *c) {
    for (size_t i = 0; i < *n; i++)
        if (v[i] == c) {
            v[i] = v[--*n];
            return;
        }
}

/* The offset every replica must have acknowledged before a held write is
 * released: the least ack of the replicas connected (whether or not our
 * mirror of etcd shows their record yet) and of those alive in etcd (-1 for
 * one not connected); LLONG_MAX when there is none. */
static long long ackedByAllOffset(void) {
    clusterState *cs = server.cluster;
    if (!cs) return LLONG_MAX;
    long long min = LLONG_MAX;
    for (int i = 0; i < repl.nlinks; i++)
        if (repl.links[i]->repl->online && repl.links[i]->repl->ack < min) min = repl.links[i]->repl->ack;
    dictIterator *it = dictGetSafeIterator(cs->nodes);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        clusterNode *n = dictGetVal(de);
        if (!clusterNodeIsReplica(n) || strcmp(n->primary, cs->myself->id) || !n->alive) continue;
        int linked = 0;
        for (int i = 0; i < repl.nlinks && !linked; i++) linked = !strcmp(repl.links[i]->repl->node_id, n->id);
        if (!linked) min = -1;
    }
    dictReleaseIterator(it);
    return min;
}

static void releaseHeld(client *c) {
    c->flags &= ~CLIENT_REPL_WAIT;
    c->repl_held = 0;
    clientQueueWrite(c);
    unblockClient(c); /* what it pipelined meanwhile runs now */
}

static void dropHeld(void);

static void checkHeld(void) {
    if (server.cluster && clusterNodeIsReplica(server.cluster->myself)) {
        dropHeld();
        return;
    }
    long long now = mstime(), acked = ackedByAllOffset();
    for (size_t i = 0; i < repl.nheld;) {
        client *c = repl.held[i];
        if (acked >= c->repl_wait_offset) {
            repl.held[i] = repl.held[--repl.nheld];
            releaseHeld(c);
            continue;
        }
        if (now - c->repl_wait_since > server.cluster_node_timeout) {
            serverLog(LL_WARNING, "Replication: no replica acknowledged offset %lld within cluster-node-timeout; "
                      "closing client id=%llu so it does not take the write as acknowledged",
                      c->repl_wait_offset, (unsigned long long)c->id);
            repl.ack_timeouts++;
            repl.held[i] = repl.held[--repl.nheld];
            c->flags &= ~CLIENT_REPL_WAIT;
            c->repl_held = 0;
            freeClientAsync(c);
            continue;
        }
        i++;
    }
}

/* The records buffer is kept between loop iterations, its pages warm: a
 * buffer freed and grown again each iteration paid the first touch of
 * every page it grew into (about 12 us per 4 KiB here: 3 ms per MiB of
 * values, 8 ms per MiB with 16 writers of 1 MiB SETs) and a realloc copy
 * per doubling. Bounded: one larger than REPL_BUF_KEEP, or four times what
 * the last 64 iterations needed at most, goes back. */
#define REPL_BUF_KEEP (64LL << 20)
static void replBufRecycle(void) {
    static size_t peak;
    static unsigned iters;
    if (sdslen(repl.buf) > peak) peak = sdslen(repl.buf);
    size_t alloc = sdsalloc(repl.buf);
    int shrink = (long long)alloc > REPL_BUF_KEEP;
    if (++iters == 64) {
        shrink |= alloc > 1024 * 1024 && alloc > 4 * peak;
        iters = 0;
        peak = 0;
    }
    if (shrink) {
        sdsfree(repl.buf);
        repl.buf = sdsempty();
    } else {
        sdsclear(repl.buf);
    }
}

/* Bytes of the stream, in order: to every online replica (large values
 * by reference to their pool extent when o is given: no copy, the version
 * kept until written), into the backlog, and counted. */
static void streamOut(const char *p, size_t len, storeObj *o) {
    if (len == 0) return;
    /* By reference only while the replica keeps up: a queued reference
     * keeps its version's pool space, and a stalled replica must not fill
     * the pool (writes would be refused) -- past a sixteenth of it (64 MiB
     * at most) queued, values are copied, as they always were. */
    unsigned long long refmax = server.self ? server.self->size / 16 : 0;
    if (refmax > 64ULL << 20) refmax = 64ULL << 20;
    for (int i = 0; i < repl.nlinks; i++) {
        client *c = repl.links[i];
        if (!c->repl->online) continue;
        if (o && c->reply_bytes + len <= refmax) addReplyRawPoolBytes(c, o, p, len);
        else addReplyProto(c, p, len);
    }
    backlogFeed(p, len);
    repl.offset += (long long)len;
}

void replBeforeSleep(void) {
    if (repl.flush_pending) {
        repl.flush_pending = 0;
        storeFlush();
    }
    size_t from, to;
    sds *keys = changedKeysNext(&repl.changed, &from, &to);
    int sent = 0;
    if (replOn && from < to) {
        if (!repl.buf) repl.buf = sdsempty();
        for (size_t i = from; i < to; i++) {
            aofValueRef r;
            repl.buf = aofCatKeyStateRef(repl.buf, keys[i], &r);
            if (r.value == NULL) continue;
            /* A large value goes from the pool, by reference, after what
             * came before it; its record's end starts the buffer anew. */
            streamOut(repl.buf, sdslen(repl.buf), NULL);
            sdsclear(repl.buf);
            streamOut(r.value, r.vlen, r.obj);
            repl.buf = aofCatValueTail(repl.buf, &r);
            sent = 1;
        }
    }
    if (repl.buf && sdslen(repl.buf)) {
        streamOut(repl.buf, sdslen(repl.buf), NULL);
        sent = 1;
    }
    if (sent) {
        for (int i = 0; i < repl.nlinks; i++) {
            client *c = repl.links[i];
            if (!c->repl->online) continue;
            if ((long long)(c->reply_bytes - (c->reply_bytes > c->repl->snap_len ? c->repl->snap_len : 0)) >
                    REPL_LINK_MAX_QUEUED &&
                !(c->flags & CLIENT_CLOSE_ASAP)) {
                serverLog(LL_WARNING, "Replication: replica %s is more than %lld MiB of records behind: dropping "
                          "its link (it will sync again)", c->repl->node_id, REPL_LINK_MAX_QUEUED >> 20);
                freeClientAsync(c);
            }
        }
        replBufRecycle();
    }
    long long acked = repl.nmarked ? ackedByAllOffset() : 0;
    for (size_t i = 0; i < repl.nmarked; i++) {
        client *c = repl.marked[i];
        c->repl_marked = 0;
        c->repl_wait_offset = repl.offset;
        if (c->repl_held) continue; /* waits on, for the newer offset */
        if (acked >= repl.offset) {
            c->flags &= ~CLIENT_REPL_WAIT;
            continue;
        }
        c->repl_wait_since = mstime();
        c->repl_held = 1;
        blockClient(c, NULL);
        repl.held_writes++;
        if (repl.nheld == repl.held_cap) {
            repl.held_cap = repl.held_cap ? repl.held_cap * 2 : 16;
            repl.held = zrealloc(repl.held, repl.held_cap * sizeof(client *));
        }
        repl.held[repl.nheld++] = c;
    }
    repl.nmarked = 0;
}

int replClientIsReplica(client *c) { return c->repl && c->repl->online; }

int replClientHeld(client *c) { return (c->flags & CLIENT_REPL_WAIT) != 0; }

void replClientGone(client *c) {
    if (c->repl_marked) removeClient(repl.marked, &repl.nmarked, c);
    if (c->repl_held) removeClient(repl.held, &repl.nheld, c);
    c->repl_marked = c->repl_held = 0;
    c->flags &= ~CLIENT_REPL_WAIT;
    if (c->repl) {
        for (int i = 0; i < repl.nlinks; i++)
            if (repl.links[i] == c) {
                repl.links[i] = repl.links[--repl.nlinks];
                break;
            }
        serverLog(LL_NOTICE, "Replication: replica %.40s (%s) disconnected", c->repl->node_id, c->addr);
        zfree(c->repl);
        c->repl = NULL;
    }
}

/* Demoted: writes whose replies wait for acks may never reach the new
 * primary. Their clients are closed, so none is taken as acknowledged. */
static void dropHeld(void) {
    if (repl.nheld + repl.nmarked)
        serverLog(LL_WARNING, "Replication: closing %zu clients whose writes were not acknowledged by a replica "
                  "before this node stopped being a primary", repl.nheld + repl.nmarked);
    while (repl.nheld) {
        client *c = repl.held[--repl.nheld];
        c->repl_held = 0;
        freeClientAsync(c);
    }
    while (repl.nmarked) {
        client *c = repl.marked[--repl.nmarked];
        c->repl_marked = 0;
        freeClientAsync(c);
    }
}

static void dropLinks(void) {
    while (repl.nlinks) {
        client *c = repl.links[0];
        replClientGone(c);
        freeClientAsync(c);
    }
}

static replicaLink *linkOf(client *c) {
    if (!c->repl) c->repl = zcalloc(sizeof(replicaLink));
    return c->repl;
}

void replconfCommand(client *c) {
    const char *opt = c->argv[1];
    if (!strcasecmp(opt, "ack") && c->argc >= 3) {
        long long off;
        if (!c->repl || !string2ll(c->argv[2], sdslen(c->argv[2]), &off)) return; /* never a reply */
        /* An ack past what was sent cannot be true: taken, it would
         * acknowledge writes (cluster-replica-ack) the replica lacks. */
        if (off > repl.offset) return;
        if (off > c->repl->ack) c->repl->ack = off;
        c->repl->ack_ms = server.mstime;
        if (repl.nheld) checkHeld();
        return;
    }
    if (!strcasecmp(opt, "failover") && c->argc == 2) {
        /* A planned failover, asked by this replica (no reply: the link
         * carries the stream). */
        if (!c->repl || !c->repl->online || repl.handover_inflight) return;
        repl.pause_until = mstime() + 2 * server.cluster_node_timeout;
        snprintf(repl.handover_to, sizeof(repl.handover_to), "%s", c->repl->node_id);
        serverLog(LL_NOTICE, "Replication: replica %s asks for a planned failover: writes paused until it has "
                  "offset %lld", c->repl->node_id, repl.offset);
        return;
    }
    if (!strcasecmp(opt, "debug-hold-stream") && (c->argc == 3 || c->argc == 4)) {
        /* Tests: the stream to every replica (or to one) stops for ms
         * (buffered, not lost), as a slow network would hold it. */
        long long ms;
        if (!string2ll(c->argv[2], sdslen(c->argv[2]), &ms) || ms < 0 || ms > 600000) {
            addReplyError(c, "ERR invalid milliseconds");
            return;
        }
        repl.debug_hold_until = mstime() + ms;
        snprintf(repl.debug_hold_id, sizeof(repl.debug_hold_id), "%.40s", c->argc == 4 ? c->argv[3] : "");
        for (int i = 0; i < repl.nlinks; i++)
            if (!repl.debug_hold_id[0] || !strcmp(repl.debug_hold_id, repl.links[i]->repl->node_id))
                repl.links[i]->flags |= CLIENT_REPL_WAIT;
        addReplyOk(c);
        return;
    }
    if (c->argc != 3) {
        addReplyError(c, "ERR syntax error");
        return;
    }
    if (!strcasecmp(opt, "node-id")) {
        if (!clusterValidId(c->argv[2])) {
            addReplyError(c, "ERR invalid node id");
            return;
        }
        snprintf(linkOf(c)->node_id, sizeof(c->repl->node_id), "%s", c->argv[2]);
        c->repl->ack = -1;
        addReplyOk(c);
    } else if (!strcasecmp(opt, "listening-port")) {
        long long port;
        if (!string2ll(c->argv[2], sdslen(c->argv[2]), &port) || port < 0 || port > 65535) {
            addReplyError(c, "ERR invalid port");
            return;
        }
        linkOf(c)->port = (int)port;
        c->repl->ack = -1;
        addReplyOk(c);
    } else {
        addReplyErrorFormat(c, "ERR Unrecognized REPLCONF option: %.64s", opt);
    }
}

static sds keepSnapshot(sds buf) { return buf; } /* detachedRewrite's emit: it all stays in the snapshot */

/* A deferred record tail's arguments: the value (in the version the block
 * holds) and the checksum of the record's bytes before it. */
typedef struct snapTail {
    const char *value;
    size_t vlen;
    uint64_t crc_seed;
} snapTail;

static void fillSnapTail(replyBlock *b) {
    snapTail t;
    memcpy(&t, b->buf + b->used, sizeof(t));
    aofWriteValueTail(b->buf, t.crc_seed, t.value, t.vlen);
    repl.snapshot_tails_filled++;
}

/* Adds c to the replicas the stream goes to. */
static void linkOnline(client *c) {
    replicaLink *l = c->repl;
    l->online = 1;
    repl.links = zrealloc(repl.links, sizeof(client *) * (size_t)(repl.nlinks + 1));
    repl.links[repl.nlinks++] = c;
    if (repl.debug_hold_until && (!repl.debug_hold_id[0] || !strcmp(repl.debug_hold_id, l->node_id)))
        c->flags |= CLIENT_REPL_WAIT;
    if (!repl.backlog) backlogReset();
    repl.no_replicas_since = 0;
    replOn = 1;
}

/* One key's record into a snapshot slice: small values copied into the
 * slice's buffer; a large one queued by reference to its pool extent (the
 * version kept until written, as the live stream sends them), its
 * record's trailer filled when the writer reaches it (addReplyFilled), so
 * the checksums are computed by the writes that drain the snapshot, a few
 * MiB at a time. */
typedef struct snapSlice {
    client *c;
    sds cur;
} snapSlice;

static void snapshotKey(void *privdata, const dictEntry *de) {
    snapSlice *sl = privdata;
    replicaLink *l = sl->c->repl;
    storeObj *o = dictGetVal(de);
    if (storeObjLocalPtr(o) == NULL && !aofObjectPlaced(o)) return; /* DEL: nothing to give */
    aofValueRef r;
    sl->cur = aofCatObjStateDeferred(sl->cur, de->key, o, storeGetExpire(de->key), &r);
    l->snap_keys++;
    if (r.value == NULL) return;
    snapTail t = {r.value, r.vlen, r.crc_seed};
    addReplyProto(sl->c, sl->cur, sdslen(sl->cur));
    addReplyRawPoolBytes(sl->c, r.obj, r.value, r.vlen);
    addReplyFilled(sl->c, r.obj, AOF_VALUE_TAIL_LEN, &t, sizeof(t), fillSnapTail);
    size_t piece = sdslen(sl->cur) + r.vlen + AOF_VALUE_TAIL_LEN;
    if (piece + REPL_SNAP_QUEUE_MAX > l->snap_len) l->snap_len = piece + REPL_SNAP_QUEUE_MAX; /* not "behind" */
    l->snap_bytes += (long long)piece;
    l->snap_byref += (long long)r.vlen;
    repl.snapshot_bytes_byref += (long long)r.vlen;
    sdsclear(sl->cur);
}

/* The next slice of c's snapshot: keys until REPL_SNAP_SLICE_US have gone
 * or REPL_SNAP_QUEUE_MAX is queued; at the end, the objects held for hosts
 * not yet back (detached.c) and the end marker. 1: more to do. */
static int snapshotSlice(client *c) {
    replicaLink *l = c->repl;
    if (c->reply_bytes >= REPL_SNAP_QUEUE_MAX) return 1; /* the socket first */
    long long t0 = ustime(), now = t0;
    snapSlice sl = {c, sdsempty()};
    do {
        for (int i = 0; i < 64; i++) { /* a bucket at a time; the clock every 64 */
            l->cursor = dictScan(server.keys, l->cursor, snapshotKey, &sl);
            if (l->cursor == 0 || c->reply_bytes >= REPL_SNAP_QUEUE_MAX) break;
        }
        if (sdslen(sl.cur) >= 1024 * 1024) {
            addReplyProto(c, sl.cur, sdslen(sl.cur));
            l->snap_bytes += (long long)sdslen(sl.cur);
            sdsclear(sl.cur);
        }
        now = ustime();
    } while (l->cursor != 0 && now - t0 < REPL_SNAP_SLICE_US && c->reply_bytes < REPL_SNAP_QUEUE_MAX);
    if (l->cursor == 0) {
        sl.cur = detachedRewrite(sl.cur, keepSnapshot);
        /* Everything of the stream up to repl.offset is queued before it:
         * this iteration's changes go out in beforeSleep, after it. */
        sl.cur = sdscatprintf(sl.cur, "+SNAPSHOT-END %lld\r\n", repl.offset);
    }
    addReplyProto(c, sl.cur, sdslen(sl.cur));
    l->snap_bytes += (long long)sdslen(sl.cur);
    sdsfree(sl.cur);
    now = ustime();
    l->snap_slices++;
    repl.snapshot_slices++;
    if (now - t0 > l->snap_longest_us) l->snap_longest_us = now - t0;
    if (now - t0 > repl.snapshot_longest_slice_us) repl.snapshot_longest_slice_us = now - t0;
    if (l->cursor != 0) return 1;
    l->snapshotting = 0;
    serverLog(LL_NOTICE, "Replication: full sync for replica %s (%s): %lld keys, %lld bytes (%lld of values sent "
              "from the pool) in %lld slices over %lld ms, the longest %lld us, to offset %lld",
              l->node_id[0] ? l->node_id : "?", c->addr, l->snap_keys, l->snap_bytes, l->snap_byref, l->snap_slices,
              mstime() - l->snap_start_ms, l->snap_longest_us, repl.offset);
    return 0;
}

static int snapshotsInProgress(void) {
    int n = 0;
    for (int i = 0; i < repl.nlinks; i++) n += repl.links[i]->repl->snapshotting;
    return n;
}

/* A time event while any full sync is in progress: every iteration while
 * a slice can be made, every millisecond while all wait for their
 * sockets, gone when none is left. */
static int snapshotStep(struct aeEventLoop *el, long long id, void *data) {
    (void)el, (void)id, (void)data;
    int active = 0, waiting = 0;
    for (int i = 0; i < repl.nlinks; i++) {
        client *c = repl.links[i];
        if (!c->repl->snapshotting || (c->flags & CLIENT_CLOSE_ASAP)) continue;
        if (c->reply_bytes >= REPL_SNAP_QUEUE_MAX) {
            waiting = 1;
            continue;
        }
        if (snapshotSlice(c)) active = 1;
    }
    if (active) return 0;
    if (waiting) return 1;
    repl.snapshot_step_id = -1;
    return AE_NOMORE;
}

/* PSYNC <replid> <offset>, as Redis: offset is the first byte the replica
 * lacks (its applied offset + 1). When replid is this primary's (or the
 * previous primary's, up to where this node followed it) and that byte is
 * still in the backlog, "+CONTINUE <replid>" and the missing bytes;
 * otherwise a full sync. "PSYNC ? -1" asks for a full sync. */
void psyncCommand(client *c) {
    clusterState *cs = server.cluster;
    if (!cs) {
        addReplyError(c, "ERR replication needs cluster mode (cluster-enabled yes)");
        return;
    }
    if (clusterNodeIsReplica(cs->myself)) {
        addReplyError(c, "-NOMASTERLINK this node is a replica: sync from its primary");
        return;
    }
    if (c->repl && c->repl->online) {
        addReplyError(c, "ERR already syncing");
        return;
    }
    /* Checked before anything changes: a refused PSYNC leaves no trace. */
    long long from;
    int full_asked = !strcmp(c->argv[1], "?");
    if (!string2ll(c->argv[2], sdslen(c->argv[2]), &from) || (full_asked ? from != -1 : from < 1)) {
        addReplyError(c, "ERR invalid replication offset: PSYNC ? -1, or PSYNC <replid> <offset> with offset >= 1");
        return;
    }
    if (!full_asked && !clusterValidId(c->argv[1])) {
        addReplyError(c, "ERR invalid replication id: 40 hexadecimal characters, or ?");
        return;
    }
    if (!repl.replid[0]) newReplid(0);
    replicaLink *l = linkOf(c);
    l->ack = -1;
    if (!full_asked) {
        int mine = !strcasecmp(c->argv[1], repl.replid);
        int previous = repl.replid2[0] && !strcasecmp(c->argv[1], repl.replid2) && from <= repl.second_offset;
        const char *why = NULL;
        if (!mine && !previous)
            why = "the replication id is neither this primary's history nor its previous one's";
        else if (!repl.backlog)
            why = "no backlog";
        else if (from < backlogFirstByte() || from > repl.offset + 1)
            why = "the offset is outside the backlog";
        if (why == NULL) {
            char head[64];
            int hl = snprintf(head, sizeof(head), "+CONTINUE %s\r\n", repl.replid);
            addReplyProto(c, head, (size_t)hl);
            long long n = backlogSend(c, from);
            l->snap_len = (size_t)n + (size_t)hl;
            /* Its ack stays -1 until it sends one (at once, after
             * +CONTINUE): held writes wait for it as for any replica. */
            linkOnline(c);
            repl.partial_ok++;
            serverLog(LL_NOTICE, "Replication: partial resync for replica %s (%s) from offset %lld: %lld bytes "
                      "from the backlog%s", l->node_id[0] ? l->node_id : "?", c->addr, from, n,
                      mine ? "" : " (it followed this node's previous primary)");
            return;
        }
        repl.partial_err++;
        serverLog(LL_NOTICE, "Replication: replica %s (%s) asked to continue from offset %lld of %.40s: full sync "
                  "instead (%s; backlog holds %lld..%lld)", l->node_id[0] ? l->node_id : "?", c->addr, from,
                  c->argv[1], why, backlogFirstByte(), repl.offset);
    }
    /* A full sync: "$EOF", then the snapshot's records, a slice of the
     * keyspace per event-loop iteration (snapshotStep), then
     * "+SNAPSHOT-END <offset>". The link is online from the start: the
     * live records of every change made meanwhile go into the same queue,
     * between the slices, in the order they were made. Every record states
     * a key's whole state when it was made (aofformat.c), so whichever of
     * a key's records comes last -- its slice's, or a later change's --
     * states what the key holds; the replica, applying them in order, ends
     * equal to the primary at the end marker, whose offset it continues
     * from. It used to be built in one pass before the reply: 6.1 s of
     * event loop for 2 million small keys (every client waited, and the
     * node's etcd lease lapses at 2 s), and the whole snapshot in heap at
     * once. Now a slice stops after REPL_SNAP_SLICE_US, and no slice is
     * made while the link has REPL_SNAP_QUEUE_MAX queued: the heap holds
     * what the socket has yet to take, a slow replica slows its own sync. */
    char head[128];
    int hl = snprintf(head, sizeof(head), "+FULLRESYNC %s %lld\r\n$EOF %lu\r\n", repl.replid, repl.offset,
                      dictSize(server.keys));
    addReplyProto(c, head, (size_t)hl);
    /* Client segments first (a PLACED record names them); one mounted
     * later comes as a live record, before any key placed in it. */
    sds first = aofCatSegments(aofCatFlushall(sdsempty()));
    addReplyProto(c, first, sdslen(first));
    l->snap_len = REPL_SNAP_QUEUE_MAX + sdslen(first) + (size_t)hl;
    l->snap_bytes = (long long)sdslen(first);
    sdsfree(first);
    l->snapshotting = 1;
    l->cursor = 0;
    l->snap_start_ms = mstime();
    l->snap_keys = l->snap_byref = l->snap_slices = l->snap_longest_us = 0;
    serverLog(LL_NOTICE, "Replication: full sync for replica %s (%s) from offset %lld: the keyspace goes in slices",
              l->node_id[0] ? l->node_id : "?", c->addr, repl.offset);
    linkOnline(c);
    repl.full_syncs_served++;
    if (repl.snapshot_step_id == -1) repl.snapshot_step_id = aeCreateTimeEvent(server.el, 0, snapshotStep, NULL, NULL);
}

/* ---- the replica's side -------------------------------------------------- */

static void linkClose(const char *why) {
    clusterSlotKeysPresize = 0; /* a sync cut short sizes nothing more */
    if (repl.fd != -1) {
        aeDeleteFileEvent(server.el, repl.fd, AE_READABLE | AE_WRITABLE);
        close(repl.fd);
        repl.fd = -1;
    }
    if (repl.state == LINK_STREAM && !repl.link_down_since) repl.link_down_since = mstime();
    /* Logged once per outage, not at every retry. */
    if (repl.state != LINK_NONE && why && !repl.down_logged) {
        serverLog(LL_NOTICE, "Replication: link with primary %s:%d down: %s (retrying every 500 ms)", repl.host,
                  repl.port, why);
        repl.down_logged = 1;
    }
    repl.state = LINK_NONE;
    repl.state_since_ms = mstime();
    if (repl.rbuf) sdsclear(repl.rbuf);
    repl.rpos = 0;
}

static void sendAck(void) {
    if (repl.fd == -1 || repl.state != LINK_STREAM) return;
    char off[32], msg[96];
    int ol = snprintf(off, sizeof(off), "%lld", repl.applied);
    int n = snprintf(msg, sizeof(msg), "*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$%d\r\n%s\r\n", ol, off);
    /* A full socket drops this ack (the next one says the same and more);
     * half of one would garble the link, so that closes it. */
    ssize_t w = write(repl.fd, msg, (size_t)n);
    if (w == n) {
        repl.last_ack_sent = repl.applied;
        repl.last_ack_ms = mstime();
    } else if (w > 0) {
        linkClose("an acknowledgement did not fit in the socket");
    }
}

/* Client segments on a replica. The primary streams SEGMENT and
 * SEGMENT.GONE as its log keeps them, and an object whose replicas all lie
 * in client segments as PLACED (aof.c). The replica holds them exactly as a
 * server restarted from its log does: the segment detached (it takes and
 * serves nothing), the object aside, not a key (detached.c), since nothing
 * proves yet that the host's memory is still what was written. Unlike a
 * load, the holding never "ends": entries stay unfiled (a SEGMENT record
 * that re-describes a segment -- its host re-attached on the primary --
 * replaces it without losing them) until this node is promoted; then they
 * are filed under their segments and wait for the hosts, whose heartbeat
 * finds the old primary gone and mounts on the slot's new owner with the
 * identity it kept (libmooncake). Owners on a replica neither expire nor
 * are probed (owner.c): the primary decides, and streams SEGMENT.GONE. */
static int primaryIsLocal(void) {
    char peer[NET_IP_STR_LEN], local[NET_IP_STR_LEN];
    return repl.fd != -1 && anetFdToString(repl.fd, peer, sizeof(peer), NULL, 1) == 0 &&
           anetFdToString(repl.fd, local, sizeof(local), NULL, 0) == 0 && anetPeerIsLocal(peer, local);
}

static void applySegmentRecord(const aofRecord *rec) {
    if (rec->type == AOF_REC_SEGMENT) {
        /* "Mounted from this machine" was the primary's view: it holds here
         * only if the primary runs on this machine too. Otherwise a probe
         * (owner.c) of the host's loopback or abstract unix endpoints would
         * reach another machine's and take a live host for a dead one. */
        aofSegment g = rec->seg;
        if (g.same_host && !primaryIsLocal()) g.same_host = 0;
        if (segmentRestoreFromLog(&g) != 0)
            serverLog(LL_WARNING, "Replication: segment id %llu from the primary cannot be held (no slot left, or "
                      "its id is this node's pool): its objects will not be re-attached here",
                      (unsigned long long)rec->seg.id);
        return;
    }
    segment *s = segmentLookupId(rec->segid);
    if (s && s->state == SEG_DETACHED) segmentUnmount(s);
}

/* At a full sync: the client segments this node knew (replicated ones, or
 * its own from before it was a replica: their objects went with its data)
 * go; the snapshot names those that are. */
static void dropClientSegments(void) {
    for (uint32_t i = 0; i < segtabLen; i++)
        if (segtab[i] && segtab[i]->id != SEGMENT_SELF_ID && segtab[i]->mem == NULL) segmentUnmount(segtab[i]);
}

static int applyRecord(const aofRecord *rec) {
    repl.records_applied++;
    if (rec->type == AOF_REC_FLUSHALL) {
        storeFlush();
        if (repl.state == LINK_SNAPSHOT && repl.presize > 0) { /* "$EOF <keys>": sized once emptied */
            dictExpand(server.keys, (unsigned long)repl.presize);
            repl.presized = repl.presize;
            /* and each slot's index, for its share of the primary's slots */
            clusterNode *p = clusterLookupNode(repl.primary_id, strlen(repl.primary_id));
            int nslots = p && p->numslots > 0 ? p->numslots : CLUSTER_SLOTS;
            unsigned long share = (unsigned long)(repl.presize / nslots);
            clusterSlotKeysPresize = share + share / 4;
            repl.presize = 0;
        }
        return 0;
    }
    if (rec->type == AOF_REC_SEGMENT || rec->type == AOF_REC_SEGMENT_GONE) {
        applySegmentRecord(rec);
        return 0;
    }
    /* A record type the log gained later (aofformat.h) must be applied
     * here too; until it is, the link drops rather than guessing. */
    if (rec->type != AOF_REC_DEL && rec->type != AOF_REC_RESTORE && rec->type != AOF_REC_PLACED) return -1;
    sds key = sdsnewlen(rec->key, rec->keylen);
    int rc = 0;
    /* A key past its TTL is stored all the same: it reads as missing and
     * goes with the primary's DEL (store.c: no expiry of a replica's own). */
    if (rec->type == AOF_REC_DEL) {
        storeDelete(key);
    } else if (rec->type == AOF_REC_PLACED) {
        storeDelete(key); /* ends a held version too (signalModifiedKey) */
        detachedLoadPlaced(key, rec->expire_ms, &rec->placed);
    } else {
        storeObj *o = dumpObjectCreate(key, &rec->dump); /* parsed and checked by aofNextRecord */
        if (o == NULL)
            rc = -1;
        else
            storeSet(key, o, rec->expire_ms ? rec->expire_ms : -1, 0);
    }
    sdsfree(key);
    return rc;
}

/* One line ending in CRLF at rbuf[rpos..]; NULL if not all here yet. */
static char *takeLine(size_t *len, int *toolong) {
    char *p = repl.rbuf + repl.rpos;
    size_t avail = sdslen(repl.rbuf) - repl.rpos;
    char *nl = memchr(p, '\n', avail);
    *toolong = !nl && avail > 256; /* the handshake's lines are short */
    if (!nl) return NULL;
    *len = (size_t)(nl - p);
    if (*len && p[*len - 1] == '\r') (*len)--;
    p[*len] = '\0';
    repl.rpos += (size_t)(nl - p) + 1;
    return p;
}

/* Logs why the primary refused the handshake, naming the config to fix
 * when it is authentication; the same reason is logged once a minute, not
 * at every retry. */
static void handshakeRefused(const char *line) {
    static char last[160];
    static long long last_ms;
    char why[160];
    if (repl.auth_sent)
        snprintf(why, sizeof(why), "authentication with masterauth%s failed (%.100s)",
                 server.masteruser && server.masteruser[0] ? " and masteruser" : "", line + 1);
    else if (!strncmp(line, "-NOAUTH", 7))
        snprintf(why, sizeof(why), "the primary requires a password: set masterauth (and masteruser for an "
                 "ACL user)");
    else if (!strncmp(line, "-NOPERM", 7))
        snprintf(why, sizeof(why), "the user has no permission for the replication commands (%.80s)", line + 1);
    else
        snprintf(why, sizeof(why), "%.150s", line + 1);
    long long now = mstime();
    if (strcmp(last, why) || now - last_ms > 60000) {
        serverLog(LL_WARNING, "Replication: primary %s:%d refused the sync: %s", repl.host, repl.port, why);
        snprintf(last, sizeof(last), "%s", why);
        last_ms = now;
    }
}

/* Parses what arrived; -1 (the link is closed) on anything unexpected. */
static int processLinkInput(void) {
    for (;;) {
        if (repl.state == LINK_HANDSHAKE) {
            size_t len;
            int toolong;
            char *line = takeLine(&len, &toolong);
            if (!line) return toolong ? -1 : 0;
            if (len > 200) goto bad;
            if (line[0] == '-') {
                handshakeRefused(line);
                return -1;
            }
            if (!strcmp(line, "+OK")) {
                repl.auth_sent = 0;
                continue;
            }
            if (!strncmp(line, "+FULLRESYNC ", 12)) {
                char id[64];
                long long off;
                if (sscanf(line + 12, "%63s %lld", id, &off) != 2 || off < 0) goto bad;
                repl.applied = off;
                snprintf(repl.replid, sizeof(repl.replid), "%.40s", id);
                repl.history = 0;
                backlogReset(); /* the stream goes on from off */
                repl.state = LINK_SNAPSHOT;
                repl.snap_left = -1;
                repl.presize = 0;
                repl.flush_pending = 0;
                storeFlush(); /* the snapshot starts with FLUSHALL too; nothing stale is served meanwhile */
                dropClientSegments();
                repl.synced_with[0] = '\0'; /* half a snapshot is no data to take over with */
                continue;
            }
            if (!strcmp(line, "+CONTINUE") || !strncmp(line, "+CONTINUE ", 10)) {
                /* The primary sends what we lack from the backlog; a new
                 * replid (it was promoted) names the history from now on. */
                if (!repl.history) goto bad;
                if (len > 10) {
                    if (!clusterValidId(line + 10)) goto bad;
                    snprintf(repl.replid, sizeof(repl.replid), "%.40s", line + 10);
                }
                if (!repl.backlog) backlogReset();
                repl.state = LINK_STREAM;
                repl.state_since_ms = mstime();
                repl.link_down_since = 0;
                repl.down_logged = 0;
                repl.partial_syncs_done++;
                snprintf(repl.synced_with, sizeof(repl.synced_with), "%s", repl.primary_id);
                serverLog(LL_NOTICE, "Replication: partial resync from %s:%d accepted: continuing from offset %lld",
                          repl.host, repl.port, repl.applied);
                sendAck(); /* held writes (cluster-replica-ack) need not wait for the next second */
                continue;
            }
            goto bad;
        }
        if (repl.state == LINK_SNAPSHOT && repl.snap_left < 0) {
            size_t len;
            int toolong;
            char *line = takeLine(&len, &toolong);
            if (!line) return toolong ? -1 : 0;
            long long n;
            if (!strncmp(line, "$EOF", 4) && (len == 4 || line[4] == ' ')) {
                /* Records until "+SNAPSHOT-END <offset>" (psyncCommand).
                 * The primary's key count, if given, sizes the keyspace
                 * now: growing it key by key rehashed every key once more
                 * (15% of a replica's sync of 2M keys, perf). Bounded: a
                 * count is a hint, and a wrong one must not take memory. */
                if (len > 5) {
                    long long keys;
                    if (!string2ll(line + 5, len - 5, &keys) || keys < 0) goto bad;
                    repl.presize = keys > REPL_PRESIZE_MAX ? REPL_PRESIZE_MAX : keys; /* at its FLUSHALL */
                }
                repl.snap_left = LLONG_MAX;
                continue;
            }
            if (line[0] != '$' || !string2ll(line + 1, len - 1, &n) || n < 0) goto bad;
            repl.snap_left = n;
            continue;
        }
        if (repl.state == LINK_SNAPSHOT && repl.snap_left == LLONG_MAX && repl.rpos < sdslen(repl.rbuf) &&
            repl.rbuf[repl.rpos] == '+') {
            /* A record starts with '*': this is the end marker. The stream
             * goes on from its offset; what came before it (the live records
             * sent between the slices) is applied but is not the stream's. */
            size_t len;
            int toolong;
            char *line = takeLine(&len, &toolong);
            if (!line) return toolong ? -1 : 0;
            long long off;
            if (strncmp(line, "+SNAPSHOT-END ", 14) || !string2ll(line + 14, len - 14, &off) || off < repl.applied)
                goto bad;
            repl.applied = off;
            backlogReset();
            goto snapshot_done;
        }
        /* records: the snapshot's, then the stream's */
        size_t avail = sdslen(repl.rbuf) - repl.rpos;
        if (avail == 0) return 0;
        if (repl.state == LINK_SNAPSHOT && repl.snap_left == 0) goto snapshot_done;
        size_t lim = repl.state == LINK_SNAPSHOT && (long long)avail > repl.snap_left ? (size_t)repl.snap_left : avail;
        /* The next records' keys, a batch at a time, fetched before they
         * are applied (prefetch.c): a full sync inserts millions, each a
         * cache miss on its bucket and chain otherwise. */
        if (repl.prefetch_left > 0) repl.prefetch_left--;
        else if (server.prefetch_batch) repl.prefetch_left = prefetchRequests(repl.rbuf + repl.rpos, lim, 16) - 1;
        aofRecord rec;
        size_t next;
        char why[128];
        int rc = aofNextRecord(repl.rbuf + repl.rpos, lim, 0, SIZE_MAX, &rec, &next, why, sizeof(why));
        if (rc == AOF_REC_END) return 0;
        if (rc == AOF_REC_TRUNCATED) {
            if (lim < avail) goto bad; /* a record longer than the snapshot says */
            return 0;
        }
        if (rc != AOF_REC_OK) {
            serverLog(LL_WARNING, "Replication: bad record from the primary at offset %lld: %s", repl.applied, why);
            return -1;
        }
        if (applyRecord(&rec) == -1) {
            serverLog(LL_WARNING, "Replication: cannot apply a record at offset %lld (pool full -- a replica "
                      "evicts nothing, so its segment-size and maxmemory must hold its primary's data -- or a bad "
                      "payload): dropping the link", repl.applied);
            return -1;
        }
        if (repl.state == LINK_SNAPSHOT) {
            repl.rpos += next;
            if (repl.snap_left == LLONG_MAX) continue; /* until the end marker */
            repl.snap_left -= (long long)next;
            if (repl.snap_left == 0) goto snapshot_done;
        } else {
            /* The stream's bytes, as they came: kept for our own replicas'
             * partial resyncs should this node be promoted. */
            backlogFeed(repl.rbuf + repl.rpos, next);
            repl.rpos += next;
            repl.applied += (long long)next;
        }
        continue;
    snapshot_done:
        clusterSlotKeysPresize = 0;
        repl.state = LINK_STREAM;
        repl.state_since_ms = mstime();
        repl.link_down_since = 0;
        repl.down_logged = 0;
        repl.full_syncs_done++;
        repl.history = 1;
        snprintf(repl.synced_with, sizeof(repl.synced_with), "%s", repl.primary_id);
        serverLog(LL_NOTICE, "Replication: full sync from %s:%d done (%llu keys), streaming from offset %lld",
                  repl.host, repl.port, (unsigned long long)storeSize(), repl.applied);
        sendAck(); /* held writes (cluster-replica-ack) need not wait for the next second */
        continue;
    }
bad:
    serverLog(LL_WARNING, "Replication: unexpected bytes from primary %s:%d in state %s", repl.host, repl.port,
              linkStateName[repl.state]);
    return -1;
}

static void linkReadHandler(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el, (void)privdata, (void)mask;
    if (!repl.rbuf) repl.rbuf = sdsempty();
    if (repl.rpos > 0 && (repl.rpos == sdslen(repl.rbuf) || repl.rpos > 4 * 1024 * 1024)) {
        sdsrange(repl.rbuf, (ssize_t)repl.rpos, -1);
        repl.rpos = 0;
    }
    repl.rbuf = sdsMakeRoomFor(repl.rbuf, REPL_READ_CHUNK);
    ssize_t n = read(fd, repl.rbuf + sdslen(repl.rbuf), REPL_READ_CHUNK);
    if (n <= 0) {
        if (n == -1 && (errno == EAGAIN || errno == EINTR)) return;
        linkClose(n == 0 ? "closed by the primary" : strerror(errno));
        return;
    }
    sdsIncrLen(repl.rbuf, n);
    server.stat_net_input_bytes += n;
    repl.last_io_ms = mstime();
    long long before = repl.applied;
    if (processLinkInput() == -1) {
        linkClose("protocol error");
        return;
    }
    if (repl.applied != before) sendAck();
}

static void linkConnected(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el, (void)privdata, (void)mask;
    int err = 0;
    socklen_t el_ = sizeof(err);
    aeDeleteFileEvent(server.el, fd, AE_WRITABLE);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el_) == -1 || err) {
        linkClose(strerror(err ? err : errno));
        return;
    }
    char port[16], from[32];
    int pl = snprintf(port, sizeof(port), "%d", server.cluster->myself->port);
    sds hs = sdsempty();
    /* masterauth (masteruser): the primary may have requirepass or ACL
     * users; its answer is the first line back (handshakeRefused). */
    repl.auth_sent = server.masterauth != NULL;
    if (repl.auth_sent) {
        const char *u = server.masteruser && server.masteruser[0] ? server.masteruser : NULL;
        hs = sdscatprintf(hs, "*%d\r\n$4\r\nAUTH\r\n", u ? 3 : 2);
        if (u) hs = sdscatprintf(hs, "$%zu\r\n%s\r\n", strlen(u), u);
        hs = sdscatprintf(hs, "$%zu\r\n", sdslen(server.masterauth));
        hs = sdscatlen(hs, server.masterauth, sdslen(server.masterauth));
        hs = sdscatlen(hs, "\r\n", 2);
    }
    hs = sdscatprintf(hs,
                          "*3\r\n$8\r\nREPLCONF\r\n$7\r\nnode-id\r\n$40\r\n%s\r\n"
                          "*3\r\n$8\r\nREPLCONF\r\n$14\r\nlistening-port\r\n$%d\r\n%s\r\n",
                          server.cluster->myself->id, pl, port);
    /* What we hold continues the history we name, from the byte after the
     * last one applied; with no such history, a full sync. */
    if (repl.history) {
        int fl = snprintf(from, sizeof(from), "%lld", repl.applied + 1);
        hs = sdscatprintf(hs, "*3\r\n$5\r\nPSYNC\r\n$40\r\n%.40s\r\n$%d\r\n%s\r\n", repl.replid, fl, from);
    } else {
        hs = sdscat(hs, "*3\r\n$5\r\nPSYNC\r\n$1\r\n?\r\n$2\r\n-1\r\n");
    }
    ssize_t w = write(fd, hs, sdslen(hs));
    int ok = w == (ssize_t)sdslen(hs);
    sdsfree(hs);
    if (!ok) {
        linkClose("cannot send the handshake");
        return;
    }
    repl.state = LINK_HANDSHAKE;
    repl.state_since_ms = mstime();
    aeCreateFileEvent(server.el, fd, AE_READABLE, linkReadHandler, NULL);
}

static void linkConnect(void) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)repl.port);
    if (inet_pton(AF_INET, repl.host, &sa.sin_addr) != 1) {
        serverLog(LL_WARNING, "Replication: primary address %s is not an IPv4 address", repl.host);
        return;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1) return;
    anetEnableTcpNoDelay(NULL, fd);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1 && errno != EINPROGRESS) {
        close(fd);
        return;
    }
    repl.fd = fd;
    repl.state = LINK_CONNECTING;
    repl.state_since_ms = mstime();
    repl.last_io_ms = mstime();
    if (aeCreateFileEvent(server.el, fd, AE_WRITABLE, linkConnected, NULL) == AE_ERR) linkClose("event loop full");
}

/* ---- roles --------------------------------------------------------------- */

static void event(const char *name, const char *fmt, const char *a, const char *b) {
    char what[256];
    snprintf(what, sizeof(what), fmt, a, b);
    notifyStoreNodeEvent(name, what);
}

/* Some replica is connected, or names this node as its primary in etcd. */
static int replicasNamed(void) {
    clusterState *cs = server.cluster;
    int any = repl.nlinks > 0;
    dictIterator *it = dictGetSafeIterator(cs->nodes);
    dictEntry *de;
    while (!any && (de = dictNext(it)) != NULL) {
        clusterNode *n = dictGetVal(de);
        any = clusterNodeIsReplica(n) && !strcmp(n->primary, cs->myself->id);
    }
    dictReleaseIterator(it);
    return any;
}

void replClusterChanged(void) {
    clusterState *cs = server.cluster;
    if (!cs) return;
    clusterNode *me = cs->myself;
    storeReplicaMode = clusterNodeIsReplica(me);
    if (clusterNodeIsReplica(me)) {
        replOn = 0;
        if (!repl.was_replica) {
            /* Demoted (or started as a replica): whatever this node holds
             * may contain writes its successor never saw; it goes before
             * anything is served, and a full sync brings the primary's.
             * Except after a planned failover to this very primary, when
             * nothing changed here since it acknowledged our whole stream:
             * then we hold exactly what it held when it took over, and
             * continue from there (PSYNC with our replid, its replid2). */
            int keep = repl.handed_to[0] && !strcmp(me->primary, repl.handed_to) &&
                       repl.offset == repl.handed_offset && !changedKeysPending(&repl.changed) &&
                       (!repl.buf || sdslen(repl.buf) == 0) && repl.backlog;
            repl.handed_to[0] = '\0';
            repl.was_replica = 1;
            repl.history = keep;
            repl.replid2[0] = '\0';
            repl.second_offset = -1;
            dropLinks();
            dropHeld();
            if (repl.buf) sdsclear(repl.buf);
            repl.pause_until = 0;
            if (keep) {
                repl.applied = repl.offset;
                serverLog(LL_NOTICE, "Replication: this node is a replica of %.40s after a planned failover: it "
                          "keeps its data (the new primary acknowledged all of it) and continues from offset %lld",
                          me->primary, repl.applied);
            } else {
                repl.flush_pending = 1;
                serverLog(LL_NOTICE, "Replication: this node is a replica of %.40s (its etcd record says so): "
                          "its data is discarded and a full sync follows", me->primary);
            }
            event("role", "role=replica primary=%s%s", me->primary, "");
        }
        clusterNode *p = clusterMyPrimary();
        /* After a failover that did not rewrite our record, our primary
         * may itself be a replica now: follow its primary. */
        if (p && clusterNodeIsReplica(p) && p->primary[0] && strcmp(p->primary, me->id)) {
            clusterNode *pp = dictFetchValue(cs->nodes, p->primary);
            if (pp) p = pp;
        }
        if (p && (strcmp(p->id, repl.primary_id) || strcmp(p->ip, repl.host) || p->port != repl.port)) {
            if (repl.primary_id[0]) linkClose("the primary changed");
            snprintf(repl.primary_id, sizeof(repl.primary_id), "%s", p->id);
            snprintf(repl.host, sizeof(repl.host), "%s", p->ip);
            repl.port = p->port;
            repl.next_try_ms = 0;
            repl.link_down_since = 0;
        }
        return;
    }
    if (repl.was_replica) {
        repl.was_replica = 0;
        linkClose(NULL);
        repl.primary_id[0] = '\0';
        /* A new history: offsets go on from what was applied, and the old
         * primary's replid stays good up to here (its backlog too), so the
         * other replicas of that primary continue from this node. */
        repl.offset = repl.applied;
        newReplid(repl.history);
        if (!repl.history) backlogFree();
        repl.history = 0;
        serverLog(LL_NOTICE, "Replication: this node is a primary now (config epoch %lld, %d slot ranges)%s",
                  me->config_epoch, me->nranges,
                  repl.replid2[0] ? "; its replicas' partial resyncs continue its old primary's history" : "");
        /* The client segments' objects the stream held: now they wait for
         * their hosts, as after a restart (owner-ttl counts from here). */
        detachedLoadDone();
        ownersPromoted();
        aofLogHeld();
        if (detachedEntries)
            serverLog(LL_NOTICE, "Replication: %lu objects in client segments are held until their hosts mount "
                      "those segments here with the identity they had (for owner-ttl at most)", detachedEntries);
        event("role", "role=primary%s%s", "", "");
    }
    /* A primary tracks changes while any replica names it, and while it
     * keeps a backlog (a replica may come back and continue). */
    replOn = replicasNamed() || repl.backlog != NULL;
    if (repl.nheld) checkHeld(); /* a replica that left may have been all a write waited for */
}

/* May this replica take its primary's place? It synced with it, and lost
 * the link recently enough that its data is worth serving. */
static int eligible(void) {
    if (strcmp(repl.synced_with, repl.primary_id)) return 0;
    if (repl.state == LINK_STREAM) return 1;
    return repl.link_down_since &&
           mstime() - repl.link_down_since <= REPL_VALIDITY_FACTOR * server.cluster_node_timeout;
}

/* Which replica goes first. Each eligible replica of the dead primary posts
 * its offset under repl/<id> in etcd (with its lease, so a dead one's goes
 * too), waits a moment, and reads its siblings': the one with the highest
 * offset (then the lowest id) sends the promotion; the others wait a node
 * timeout for it before trying themselves. The transaction still decides
 * who wins; the ranking only makes the winner the one that lost least. */
#define RANK_WAIT_MS 300

static struct {
    int phase;                          /* 0 none, 1 posted, 2 reading, 3 deferred */
    long long deadline;
    char primary[CLUSTER_NAMELEN + 1];
    long long epoch;
} rank;

static sds rankKey(const char *id) {
    return sdscatprintf(sdsdup(server.cluster->prefix), "repl/%s", id);
}

static void rankPosted(const etcdResult *r, void *privdata) {
    (void)r, (void)privdata; /* best effort: the ranking is an optimisation */
}

static void promoteNow(clusterNode *p, const char *why) {
    repl.promoting = 1;
    repl.last_failover_ms = mstime();
    serverLog(LL_WARNING, "Replication: primary %s's etcd lease expired (no renewal for cluster-node-timeout); "
              "this replica (offset %lld) tries to take its slots: %s", p->id, repl.applied, why);
    clusterPromoteMyself(NULL, "auto");
}

static void rankRead(const etcdResult *r, void *privdata) {
    (void)privdata;
    clusterState *cs = server.cluster;
    clusterNode *p = clusterMyPrimary();
    if (rank.phase != 2 || !p || strcmp(p->id, rank.primary)) return;
    if (!r->ok) {
        rank.phase = 1;
        rank.deadline = mstime() + RANK_WAIT_MS;
        return;
    }
    const char *best = cs->myself->id;
    long long best_off = repl.applied;
    size_t pl = sdslen(cs->prefix) + 5;
    for (int i = 0; i < r->nkvs; i++) {
        const etcdKV *kv = &r->kvs[i];
        if (sdslen(kv->key) != pl + CLUSTER_NAMELEN || !kv->value) continue;
        char id[CLUSTER_NAMELEN + 1], prim[CLUSTER_NAMELEN + 1];
        long long epoch, off;
        memcpy(id, kv->key + pl, CLUSTER_NAMELEN);
        id[CLUSTER_NAMELEN] = '\0';
        if (sscanf(kv->value, "%40s %lld %lld", prim, &epoch, &off) != 3) continue;
        clusterNode *n = clusterLookupNode(id, CLUSTER_NAMELEN);
        if (!n || !n->alive || strcmp(prim, rank.primary) || epoch != rank.epoch || !strcmp(id, cs->myself->id))
            continue;
        if (off > best_off || (off == best_off && strcmp(n->id, best) < 0)) {
            best = n->id;
            best_off = off;
        }
    }
    if (best == cs->myself->id) {
        promoteNow(p, "it has the highest offset among the replicas that posted theirs");
        return;
    }
    serverLog(LL_NOTICE, "Replication: replica %s has a higher offset (%lld > %lld): leaving the failover to it "
              "for cluster-node-timeout", best, best_off, repl.applied);
    rank.phase = 3;
    rank.deadline = mstime() + server.cluster_node_timeout;
}

static void maybeFailover(void) {
    clusterState *cs = server.cluster;
    clusterNode *p = clusterMyPrimary();
    if (!p || p->alive || clusterNodeIsReplica(p)) {
        rank.phase = 0;
        return;
    }
    if (repl.promoting || !cs->synced || cs->etcd_down_since) return;
    if (!eligible()) {
        static long long lastlog;
        if (mstime() - lastlog > 5000) {
            lastlog = mstime();
            serverLog(LL_WARNING, "Replication: primary %s is down but this replica may not take over: %s",
                      p->id, strcmp(repl.synced_with, p->id) ? "it has not completed a sync with it"
                                                             : "its data is too old (link down too long)");
        }
        return;
    }
    long long now = mstime();
    int siblings = 0;
    dictIterator *it = dictGetSafeIterator(cs->nodes);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        clusterNode *n = dictGetVal(de);
        siblings += n != cs->myself && n->alive && clusterNodeIsReplica(n) && !strcmp(n->primary, p->id);
    }
    dictReleaseIterator(it);
    if (siblings == 0) {
        promoteNow(p, "it is its only live replica");
        return;
    }
    if (rank.phase == 0 || strcmp(rank.primary, p->id) || rank.epoch != p->config_epoch) {
        snprintf(rank.primary, sizeof(rank.primary), "%s", p->id);
        rank.epoch = p->config_epoch;
        sds key = rankKey(cs->myself->id);
        sds val = sdscatprintf(sdsempty(), "%s %lld %lld", p->id, p->config_epoch, repl.applied);
        etcdPut(cs->etcd, key, sdslen(key), val, sdslen(val), cs->lease_id, rankPosted, NULL);
        sdsfree(key);
        sdsfree(val);
        rank.phase = 1;
        rank.deadline = now + RANK_WAIT_MS;
        return;
    }
    if (rank.phase == 1 && now >= rank.deadline) {
        sds start = sdscatprintf(sdsdup(cs->prefix), "repl/");
        sds end = etcdPrefixEnd(start, sdslen(start));
        rank.phase = 2;
        etcdRange(cs->etcd, start, sdslen(start), end, sdslen(end), rankRead, NULL);
        sdsfree(start);
        sdsfree(end);
    } else if (rank.phase == 3 && now >= rank.deadline) {
        promoteNow(p, "the replica with a higher offset did not take over");
    }
}

void replFailoverDone(const char *kind, const char *old_primary, int automatic, const char *err) {
    char ms[32];
    repl.promoting = 0;
    rank.phase = 0;
    if (!strcasecmp(kind, "handover")) {
        repl.handover_inflight = 0;
        repl.pause_until = 0;
        repl.handover_to[0] = '\0';
        if (err && err[0]) repl.handed_to[0] = '\0';
    }
    if (err && err[0]) {
        serverLog(LL_WARNING, "Replication: %s failover (%s) did not happen: %s", automatic ? "automatic" : "manual",
                  kind, err);
        return;
    }
    repl.failovers++;
    snprintf(ms, sizeof(ms), "%lld", repl.last_failover_ms ? mstime() - repl.last_failover_ms : 0LL);
    if (!strcasecmp(kind, "promote")) {
        serverLog(LL_WARNING, "Replication: %s failover done: this node took the slots of %s (%s ms after "
                  "deciding), config epoch %lld", automatic ? "automatic" : "forced", old_primary, ms,
                  server.cluster->myself->config_epoch);
        event("failover", "old=%s took_ms=%s", old_primary, ms);
    } else {
        serverLog(LL_NOTICE, "Replication: planned failover done: slots handed to %s; this node is its replica now",
                  server.cluster->myself->primary);
        event("failover", "handed_to=%s%s", server.cluster->myself->primary, "");
    }
}

void replFailoverCommand(client *c) {
    clusterState *cs = server.cluster;
    int force = 0, takeover = 0;
    if (c->argc == 3) {
        if (!strcasecmp(c->argv[2], "force")) force = 1;
        else if (!strcasecmp(c->argv[2], "takeover")) takeover = 1;
        else {
            addReplyError(c, "ERR syntax error");
            return;
        }
    } else if (c->argc > 3) {
        addReplyError(c, "ERR syntax error");
        return;
    }
    clusterNode *p = clusterMyPrimary();
    if (!clusterNodeIsReplica(cs->myself)) {
        addReplyError(c, "ERR You should send CLUSTER FAILOVER to a replica");
        return;
    }
    if (!p) {
        addReplyError(c, "ERR I'm a replica but my master is unknown to me");
        return;
    }
    if (force || takeover) {
        repl.last_failover_ms = mstime();
        serverLog(LL_WARNING, "Replication: CLUSTER FAILOVER %s: taking the slots of %s without its agreement",
                  force ? "FORCE" : "TAKEOVER", p->id);
        repl.promoting = 1;
        clusterPromoteMyself(c, "force"); /* replies when etcd committed */
        return;
    }
    if (repl.state != LINK_STREAM || (p->flags & CNODE_FAIL)) {
        addReplyError(c, "ERR Master is down or failed, please use CLUSTER FAILOVER FORCE");
        return;
    }
    static const char msg[] = "*2\r\n$8\r\nREPLCONF\r\n$8\r\nFAILOVER\r\n";
    if (write(repl.fd, msg, sizeof(msg) - 1) != (ssize_t)sizeof(msg) - 1) {
        addReplyError(c, "ERR cannot reach the primary over the replication link");
        return;
    }
    repl.last_failover_ms = mstime();
    serverLog(LL_NOTICE, "Replication: CLUSTER FAILOVER: asked primary %s for a planned failover", p->id);
    addReplyOk(c);
}

void replCron(void) {
    clusterState *cs = server.cluster;
    if (!cs) return;
    long long now = mstime();
    if (clusterNodeIsReplica(cs->myself) && repl.primary_id[0]) {
        long long timeout = server.cluster_node_timeout;
        if (repl.state == LINK_NONE && now >= repl.next_try_ms && !repl.promoting) {
            repl.next_try_ms = now + 500;
            linkConnect();
        } else if ((repl.state == LINK_CONNECTING || repl.state == LINK_HANDSHAKE) &&
                   now - repl.state_since_ms > timeout) {
            linkClose("no answer within cluster-node-timeout");
        } else if (repl.state == LINK_STREAM && now - repl.last_ack_ms >= 1000) {
            sendAck();
        }
        maybeFailover();
    }
    if (repl.backlog && !clusterNodeIsReplica(cs->myself) && server.repl_backlog_ttl > 0) {
        if (repl.nlinks || replicasNamed()) {
            repl.no_replicas_since = 0;
        } else if (!repl.no_replicas_since) {
            repl.no_replicas_since = now;
        } else if (now - repl.no_replicas_since > server.repl_backlog_ttl * 1000) {
            /* The stream stops here, so its history ends: a replica that
             * comes back later must not continue past writes it never got. */
            backlogFree();
            newReplid(0);
            replOn = 0;
            repl.no_replicas_since = 0;
            serverLog(LL_NOTICE, "Replication: no replica for repl-backlog-ttl (%lld s): backlog freed, new "
                      "replication id %s", server.repl_backlog_ttl, repl.replid);
        }
    }
    if (repl.nheld) checkHeld();
    if (repl.debug_hold_until && now >= repl.debug_hold_until) {
        repl.debug_hold_until = 0;
        for (int i = 0; i < repl.nlinks; i++) {
            repl.links[i]->flags &= ~CLIENT_REPL_WAIT;
            clientQueueWrite(repl.links[i]);
        }
    }
    /* A planned failover: once the replica has everything, hand over. */
    if (repl.pause_until) {
        if (now > repl.pause_until) {
            serverLog(LL_WARNING, "Replication: planned failover to %s timed out; writes resume", repl.handover_to);
            repl.pause_until = 0;
            repl.handover_to[0] = '\0';
        } else if (!repl.handover_inflight) {
            for (int i = 0; i < repl.nlinks; i++) {
                replicaLink *l = repl.links[i]->repl;
                if (!strcmp(l->node_id, repl.handover_to) && l->ack >= repl.offset && !changedKeysPending(&repl.changed) &&
                    (!repl.buf || sdslen(repl.buf) == 0)) {
                    repl.handover_inflight = 1;
                    snprintf(repl.handed_to, sizeof(repl.handed_to), "%s", l->node_id);
                    repl.handed_offset = repl.offset;
                    serverLog(LL_NOTICE, "Replication: replica %s has offset %lld: handing over the slots",
                              l->node_id, l->ack);
                    clusterHandOver(l->node_id);
                    break;
                }
            }
        }
    }
}

const char *replWriteRefusal(client *c) {
    if (!server.cluster) return NULL;
    if (c->repl) return NULL;
    if (clusterNodeIsReplica(server.cluster->myself)) return "-READONLY You can't write against a read only replica.";
    if (repl.pause_until) return "-TRYAGAIN a planned failover is in progress: writes are paused";
    return clusterWriteFence();
}

/* ---- INFO ---------------------------------------------------------------- */

sds replInfo(sds s) {
    clusterState *cs = server.cluster;
    if (!repl.replid[0]) newReplid(0);
    int replica = cs && clusterNodeIsReplica(cs->myself);
    long long now = mstime();
    if (replica) {
        s = sdscatprintf(s,
                         "role:slave\r\n"
                         "master_host:%s\r\n"
                         "master_port:%d\r\n"
                         "master_node_id:%s\r\n"
                         "master_link_status:%s\r\n"
                         "master_link_state:%s\r\n"
                         "master_last_io_seconds_ago:%lld\r\n"
                         "master_sync_in_progress:%d\r\n"
                         "slave_read_repl_offset:%lld\r\n"
                         "slave_repl_offset:%lld\r\n"
                         "master_link_down_since_seconds:%lld\r\n"
                         "slave_read_only:1\r\n"
                         "replica_announced:1\r\n"
                         "full_syncs_done:%lld\r\n"
                         "records_applied:%lld\r\n"
                         "full_sync_keys_presized:%lld\r\n"
                         "failover_eligible:%d\r\n",
                         repl.host, repl.port, repl.primary_id, repl.state == LINK_STREAM ? "up" : "down",
                         linkStateName[repl.state], repl.last_io_ms ? (now - repl.last_io_ms) / 1000 : -1,
                         repl.state == LINK_SNAPSHOT || repl.state == LINK_HANDSHAKE, repl.applied, repl.applied,
                         repl.state == LINK_STREAM ? 0 : (now - repl.state_since_ms) / 1000, repl.full_syncs_done,
                         repl.records_applied, repl.presized, repl.primary_id[0] && eligible());
    } else {
        s = sdscatprintf(s, "role:master\r\nconnected_slaves:%d\r\n", repl.nlinks);
        for (int i = 0; i < repl.nlinks; i++) {
            client *c = repl.links[i];
            replicaLink *l = c->repl;
            char ip[NET_ADDR_STR_LEN];
            snprintf(ip, sizeof(ip), "%s", c->addr);
            char *colon = strrchr(ip, ':');
            if (colon) *colon = '\0';
            s = sdscatprintf(s, "slave%d:ip=%s,port=%d,state=%s,offset=%lld,lag=%lld,node_id=%s\r\n", i, ip, l->port,
                             l->online ? "online" : "wait_bgsave", l->ack < 0 ? 0 : l->ack,
                             l->ack_ms ? (now - l->ack_ms) / 1000 : -1, l->node_id);
        }
    }
    return sdscatprintf(s,
                        "master_failover_state:%s\r\n"
                        "master_replid:%s\r\n"
                        "master_replid2:%s\r\n"
                        "master_repl_offset:%lld\r\n"
                        "second_repl_offset:%lld\r\n"
                        "repl_backlog_active:%d\r\n"
                        "repl_backlog_size:%lld\r\n"
                        "repl_backlog_first_byte_offset:%lld\r\n"
                        "repl_backlog_histlen:%lld\r\n"
                        "sync_full:%lld\r\n"
                        "sync_partial_ok:%lld\r\n"
                        "sync_partial_err:%lld\r\n"
                        "repl_partial_syncs_done:%lld\r\n"
                        "repl_replica_ack:%d\r\n"
                        "repl_ack_waiting_clients:%zu\r\n"
                        "repl_ack_held_writes:%lld\r\n"
                        "repl_ack_timeouts:%lld\r\n"
                        "repl_full_syncs_served:%lld\r\n"
                        "repl_full_sync_bytes_from_pool:%lld\r\n"
                        "repl_full_sync_checksums_at_write:%lld\r\n"
                        "repl_full_syncs_in_progress:%d\r\n"
                        "repl_full_sync_slices:%lld\r\n"
                        "repl_full_sync_longest_slice_usec:%lld\r\n"
                        "repl_failovers:%lld\r\n"
                        "repl_write_fenced:%d\r\n",
                        repl.pause_until ? "waiting-for-sync" : repl.promoting ? "failover-in-progress" : "no-failover",
                        repl.replid, repl.replid2[0] ? repl.replid2 : "0000000000000000000000000000000000000000",
                        replOffset(), repl.second_offset, repl.backlog != NULL, server.repl_backlog_size,
                        backlogFirstByte(), repl.backlog ? repl.backlog->histlen : 0LL,
                        repl.full_syncs_served, repl.partial_ok, repl.partial_err, repl.partial_syncs_done,
                        server.cluster_replica_ack,
                        repl.nheld, repl.held_writes, repl.ack_timeouts, repl.full_syncs_served, repl.snapshot_bytes_byref, repl.snapshot_tails_filled,
                        snapshotsInProgress(), repl.snapshot_slices, repl.snapshot_longest_slice_us, repl.failovers,
                        cs && clusterWriteFence() != NULL);
}
