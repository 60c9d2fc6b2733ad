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
 * until written, as a GET's large reply does) while that replica holds
 * references to less than a sixteenth of the pool (or to none: then one
 * value of any size); a replica further behind gets copies, so it can
 * never hold the pool's space and fail writes. Only the copies count
 * against client-output-buffer-limit replica (replLinkBehind). The
 * backlog keeps its own copy. With the CRC64 folded by carry-less
 * multiplies (crc.c) and the records buffer kept warm, 1 MiB SETs reach a
 * replica at about 1 GB/s here (BENCHMARKS.md).
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
 * fail over to); a replica whose lease lapses has its link dropped
 * (replPeerLapsed), so a frozen one does not hold every write, and may not
 * take over until it has synced again (replAliveLapsed). A wait longer than cluster-node-timeout closes the
 * connection: the client sees no acknowledgement, which is the truth.
 * Together with fencing (cluster_sync.c) and the promotion rules
 * (replication_failover.c), nothing acknowledged is lost when a primary fails.
 *
 * Three files share the work, over one state (replication_internal.h says
 * why one): this one, the primary's side -- the backlog, the hooks that
 * collect records, the links to replicas, held replies, PSYNC and the
 * snapshot in slices -- and the cron and INFO, which act on and show both
 * sides; replication_replica.c, the replica's side, its link to its
 * primary (the handshake, the records applied); replication_failover.c,
 * roles: which node is whose replica, and failover, automatic and planned.
 */
#include "replication.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "aof.h"
#include "aofformat.h"
#include "cluster.h"
#include "detached.h"
#include "dict.h"
#include "multi.h"
#include "replication_internal.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

int replOn;

/* A full sync's slices (snapshotStep): at most this long each, and none
 * while this much is queued to the replica. */
#define REPL_SNAP_SLICE_US 1000
#define REPL_SNAP_QUEUE_MAX (8u * 1024 * 1024)

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

replState repl = {.fd = -1, .state = LINK_NONE, .second_offset = -1, .snapshot_step_id = -1};

/* ---- the backlog --------------------------------------------------------- */

static long long streamEnd(void) {
    clusterNode *me = server.cluster ? server.cluster->myself : NULL;
    return me && clusterNodeIsReplica(me) ? repl.applied : repl.offset;
}

static long long backlogFirstByte(void) {
    return repl.backlog ? streamEnd() - repl.backlog->histlen + 1 : 0;
}

/* Empty, of repl-backlog-size; the next byte fed is the stream's next. */
void replBacklogReset(void) {
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

size_t replBacklogMemory(void) {
    return repl.backlog ? zmalloc_size(repl.backlog) + zmalloc_size(repl.backlog->buf) : 0;
}

void replBacklogFree(void) {
    if (!repl.backlog) return;
    zfree(repl.backlog->buf);
    zfree(repl.backlog);
    repl.backlog = NULL;
}

/* Called with the bytes the stream's offset is about to advance by. */
void replBacklogFeed(const char *p, size_t len) {
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
    replBacklogReset();
    for (long long left = keep; left > 0;) {
        long long n = left < old->size - pos ? left : old->size - pos;
        replBacklogFeed(old->buf + pos, (size_t)n);
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
void replNewReplid(int keep) {
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

static client **waiting; /* WAIT's blocked clients (waitCommand below); wait_listed: index + 1 */
static size_t nwaiting, waiting_cap;
static int waitingDirty; /* a WAIT arrived or an ack moved since the last look */
static void replCheckWaiting(int in_before_sleep);

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

void replCheckHeld(void) {
    if (server.cluster && clusterNodeIsReplica(server.cluster->myself)) {
        replDropHeld();
        return;
    }
    long long now = monoMs(), acked = ackedByAllOffset();
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
    /* By reference while the replica keeps up: a queued reference keeps
     * its version's pool space, and a stalled replica must not fill the
     * pool (writes would be refused). So a replica holds references to a
     * sixteenth of the pool at most (64 MiB), or to one value of any size
     * when it holds none -- past that, values are copied. The one value:
     * a value larger than the bound was always copied, and one larger than
     * client-output-buffer-limit replica (256 MiB by default, where
     * max-object-size is 1 GiB) put the link past its limit on its own, so
     * every such SET dropped the link and synced the whole dataset again. */
    unsigned long long refmax = server.self ? server.self->size / 16 : 0;
    if (refmax > 64ULL << 20) refmax = 64ULL << 20;
    for (int i = 0; i < repl.nlinks; i++) {
        client *c = repl.links[i];
        if (!c->repl->online) continue;
        if (o && (c->reply_ref_bytes == 0 || c->reply_ref_bytes + len <= refmax)) addReplyRawPoolBytes(c, o, p, len);
        else addReplyProto(c, p, len);
    }
    replBacklogFeed(p, len);
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
    if (sent) replBufRecycle();
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
        c->repl_wait_since = monoMs();
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
    if (nwaiting && waitingDirty) replCheckWaiting(1);
}

int replClientIsReplica(client *c) { return c->repl && c->repl->online; }

/* What a replica's link is behind by, for client-output-buffer-limit
 * replica (networking.c): its queued copies less its snapshot's (or the
 * backlog's), which are queued once on purpose and are not "behind". A
 * link past the limit is dropped and the replica syncs again, so a stalled
 * one cannot take the primary's memory, as in Redis. Values queued by
 * reference to the pool are not counted: they take no memory of the
 * primary's beyond the values themselves, and streamOut bounds them. */
unsigned long long replLinkBehind(client *c) {
    size_t snap = c->repl ? c->repl->snap_len : 0, copied = c->reply_bytes - c->reply_ref_bytes;
    return copied > snap ? copied - snap : 0;
}

const char *replLinkNodeId(client *c) { return c->repl && c->repl->node_id[0] ? c->repl->node_id : "?"; }

int replClientHeld(client *c) { return (c->flags & CLIENT_REPL_WAIT) != 0; }

/* ---- WAIT and ROLE ------------------------------------------------------ */

/* WAIT numreplicas timeout, as Redis's: the client blocks until that many
 * replicas have acknowledged the stream up to its writes, or timeout ms
 * (0: for ever), and gets how many have. The offset waited for is the
 * stream's end once this iteration's records are out (set in
 * replBeforeSleep): it covers every write the client sent before, the
 * same iteration's included -- later ones of others' too, which asks a
 * little more than Redis's per-client offset, never less. A standalone
 * server has no replicas: WAIT 0 answers 0, WAIT n blocks until its
 * timeout, as Redis's does without replicas. Under cluster-replica-ack
 * the write's reply already waited for every replica. */
static int replicasAcked(long long offset) {
    int n = 0;
    for (int i = 0; i < repl.nlinks; i++)
        if (repl.links[i]->repl->online && repl.links[i]->repl->ack >= offset) n++;
    return n;
}

static void waitingRemove(client *c) {
    size_t i = (size_t)c->wait_listed - 1;
    waiting[i] = waiting[--nwaiting];
    waiting[i]->wait_listed = (int)i + 1;
    c->wait_listed = 0;
}

/* Answers the WAITs that are done: enough acks, or their time is up. One
 * walk of the list, and only when something changed -- a WAIT arrived (its
 * offset is set here, after this iteration's records went out), an ack
 * moved (beforeSleep), or a cron tick (timeouts): never per ack or per
 * request. The done are taken out first and answered after the walk: an
 * answered client runs what it pipelined, which may WAIT again. */
static void replCheckWaiting(int in_before_sleep) {
    long long now = monoMs();
    if (in_before_sleep) waitingDirty = 0;
    client **done = NULL;
    size_t ndone = 0;
    for (size_t i = 0; i < nwaiting;) {
        client *c = waiting[i];
        if (c->wait_offset < 0) {
            /* Its offset is the stream's end once this iteration's records
             * are out: only beforeSleep knows it (a cron tick runs before). */
            if (!in_before_sleep) {
                i++;
                continue;
            }
            c->wait_offset = repl.offset;
        }
        if (replicasAcked(c->wait_offset) >= c->wait_replicas || (c->wait_deadline && now >= c->wait_deadline)) {
            if (done == NULL) done = zmalloc(nwaiting * sizeof(client *));
            done[ndone++] = c;
            waitingRemove(c); /* the last one moves into i: look at i again */
            continue;
        }
        i++;
    }
    for (size_t i = 0; i < ndone; i++) {
        addReplyLongLong(done[i], replicasAcked(done[i]->wait_offset));
        unblockClient(done[i]);
    }
    zfree(done);
}

void waitCommand(client *c) {
    long long n, timeout;
    if (getLongLongFromObjectOrReply(c, c->argv[1], &n, NULL) != C_OK) return;
    if (getLongLongFromObjectOrReply(c, c->argv[2], &timeout, "ERR timeout is not an integer or out of range") !=
        C_OK)
        return;
    if (timeout < 0) {
        addReplyError(c, "ERR timeout is negative");
        return;
    }
    if (server.cluster && clusterNodeIsReplica(server.cluster->myself)) {
        addReplyError(c, "ERR WAIT cannot be used with replica instances.");
        return;
    }
    /* In a transaction nothing may block: the count as it is (Redis too). */
    if (c->flags & CLIENT_IN_EXEC) {
        addReplyLongLong(c, replicasAcked(repl.offset));
        return;
    }
    if (n <= 0 && !replOn) {
        addReplyLongLong(c, 0);
        return;
    }
    c->wait_replicas = n > INT_MAX ? INT_MAX : (int)n;
    c->wait_offset = -1;
    c->wait_deadline = timeout ? addSaturate(monoMs(), timeout) : 0;
    if (nwaiting == waiting_cap) {
        waiting_cap = waiting_cap ? waiting_cap * 2 : 16;
        waiting = zrealloc(waiting, waiting_cap * sizeof(client *));
    }
    waiting[nwaiting++] = c;
    c->wait_listed = (int)nwaiting;
    waitingDirty = 1;
    blockClient(c, NULL);
}

/* A replica link's address without its port (it announced its own port:
 * the connection's is ephemeral), for INFO and ROLE. */
static void linkIp(client *r, char *ip, size_t len) {
    snprintf(ip, len, "%s", r->addr);
    char *colon = strrchr(ip, ':');
    if (colon) *colon = '\0';
}

/* ROLE, as Redis's: a primary's offset and its replicas (address, port,
 * acknowledged offset); a replica's primary and link state. */
void roleCommand(client *c) {
    clusterState *cs = server.cluster;
    if (cs && clusterNodeIsReplica(cs->myself)) {
        static const char *state[] = {"connect", "connecting", "handshake", "sync", "connected"};
        addReplyArrayLen(c, 5);
        addReplyBulkCString(c, "slave");
        addReplyBulkCString(c, repl.host);
        addReplyLongLong(c, repl.port);
        addReplyBulkCString(c, repl.primary_id[0] && repl.state <= LINK_STREAM ? state[repl.state] : "connect");
        addReplyLongLong(c, repl.applied);
        return;
    }
    addReplyArrayLen(c, 3);
    addReplyBulkCString(c, "master");
    addReplyLongLong(c, replOffset());
    int online = 0;
    for (int i = 0; i < repl.nlinks; i++) online += repl.links[i]->repl->online;
    addReplyArrayLen(c, online);
    for (int i = 0; i < repl.nlinks; i++) {
        client *r = repl.links[i];
        if (!r->repl->online) continue;
        char ip[NET_ADDR_STR_LEN], port[16], off[32];
        linkIp(r, ip, sizeof(ip));
        snprintf(port, sizeof(port), "%d", r->repl->port);
        snprintf(off, sizeof(off), "%lld", r->repl->ack < 0 ? 0 : r->repl->ack);
        addReplyArrayLen(c, 3);
        addReplyBulkCString(c, ip);
        addReplyBulkCString(c, port);
        addReplyBulkCString(c, off);
    }
}

void replClientGone(client *c) {
    if (c->wait_listed) waitingRemove(c);
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
void replDropHeld(void) {
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

/* A replica's alive key left etcd: its lease lapsed (it died, froze, or
 * lost etcd). A link still open to it -- a frozen process's socket stays
 * open, its acks stop -- would hold every acknowledged write until
 * cluster-node-timeout closed its client, for as long as the replica
 * stayed frozen: a replica that is not alive is waited for no more. Its
 * link goes now, so the writes waiting on it are released when the
 * topology is rebuilt (replClusterChanged) and new ones are not held for
 * it; woken, it finds its link closed and its own lease lapsed, and may not
 * take over until it has synced again (replAliveLapsed). */
void replPeerLapsed(const char *id) {
    clusterState *cs = server.cluster;
    if (!cs || clusterNodeIsReplica(cs->myself)) return;
    for (int i = 0; i < repl.nlinks;) {
        client *c = repl.links[i];
        if (strcmp(c->repl->node_id, id)) {
            i++;
            continue;
        }
        serverLog(LL_WARNING, "Replication: replica %s's etcd lease lapsed: dropping its link (%s), writes no "
                  "longer wait for it", id, c->addr);
        replClientGone(c); /* takes it out of links: the same i is the next one */
        freeClientAsync(c);
    }
}

void replDropLinks(void) {
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
        c->repl->ack_ms = server.monotime;
        if (repl.nheld) replCheckHeld();
        waitingDirty = 1; /* looked at once, in beforeSleep, however many acks came */
        return;
    }
    if (!strcasecmp(opt, "failover") && c->argc == 2) {
        /* A planned failover, asked by this replica (no reply: the link
         * carries the stream). Any other client is answered: it would
         * wait for a reply forever. */
        if (!c->repl || !c->repl->online) {
            addReplyError(c, "ERR REPLCONF FAILOVER is sent only by a replica over its replication link: send "
                          "CLUSTER FAILOVER to the replica");
            return;
        }
        if (repl.handover_inflight) return;
        repl.pause_until = monoMs() + 2 * server.cluster_node_timeout;
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
        repl.debug_hold_until = monoMs() + ms;
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
    if (!repl.backlog) replBacklogReset();
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
    long long t0 = monoUs(), now = t0;
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
        now = monoUs();
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
    now = monoUs();
    l->snap_slices++;
    repl.snapshot_slices++;
    if (now - t0 > l->snap_longest_us) l->snap_longest_us = now - t0;
    if (now - t0 > repl.snapshot_longest_slice_us) repl.snapshot_longest_slice_us = now - t0;
    if (l->cursor != 0) return 1;
    l->snapshotting = 0;
    serverLog(LL_NOTICE, "Replication: full sync for replica %s (%s): %lld keys, %lld bytes (%lld of values sent "
              "from the pool) in %lld slices over %lld ms, the longest %lld us, to offset %lld",
              l->node_id[0] ? l->node_id : "?", c->addr, l->snap_keys, l->snap_bytes, l->snap_byref, l->snap_slices,
              monoMs() - l->snap_start_ms, l->snap_longest_us, repl.offset);
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
    if (cs->held_empty) {
        /* Our keyspace is empty after a restart without a log: a replica
         * syncing from it would lose what it holds. It keeps its data and
         * its right to take over; the watch tells us when one did. */
        addReplyError(c, "-NOMASTERLINK this primary restarted without its data: waiting for a replica to take over");
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
    if (!repl.replid[0]) replNewReplid(0);
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
            /* Online, its backlog bytes counted as not behind, before they
             * are queued: they are held to the replica output class, not
             * the normal one (networking.c). Its ack stays -1 until it
             * sends one (at once, after +CONTINUE): held writes wait for
             * it as for any replica. */
            l->snap_len = (size_t)(repl.offset + 1 - from) + (size_t)hl;
            linkOnline(c);
            addReplyProto(c, head, (size_t)hl);
            long long n = backlogSend(c, from);
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
    /* Client segments first (a PLACED record names them); one mounted
     * later comes as a live record, before any key placed in it. Online,
     * and these counted as not behind, before anything is queued, as for
     * +CONTINUE. */
    sds first = aofCatSegments(aofCatFlushall(sdsempty()));
    l->snap_len = REPL_SNAP_QUEUE_MAX + sdslen(first) + (size_t)hl;
    l->snap_bytes = (long long)sdslen(first);
    linkOnline(c);
    addReplyProto(c, head, (size_t)hl);
    addReplyProto(c, first, sdslen(first));
    sdsfree(first);
    l->snapshotting = 1;
    l->cursor = 0;
    l->snap_start_ms = monoMs();
    l->snap_keys = l->snap_byref = l->snap_slices = l->snap_longest_us = 0;
    serverLog(LL_NOTICE, "Replication: full sync for replica %s (%s) from offset %lld: the keyspace goes in slices",
              l->node_id[0] ? l->node_id : "?", c->addr, repl.offset);
    repl.full_syncs_served++;
    if (repl.snapshot_step_id == -1) repl.snapshot_step_id = aeCreateTimeEvent(server.el, 0, snapshotStep, NULL, NULL);
}

/* ---- the cron ------------------------------------------------------------ */

void replCron(void) {
    clusterState *cs = server.cluster;
    if (nwaiting) replCheckWaiting(0); /* timeouts (a standalone server's WAITs too) */
    if (!cs) return;
    long long now = monoMs();
    if (clusterNodeIsReplica(cs->myself) && repl.primary_id[0]) {
        long long timeout = server.cluster_node_timeout;
        if (repl.state == LINK_NONE && now >= repl.next_try_ms && !repl.promoting) {
            repl.next_try_ms = now + 500;
            replLinkConnect();
        } else if ((repl.state == LINK_CONNECTING || repl.state == LINK_HANDSHAKE) &&
                   now - repl.state_since_ms > timeout) {
            replLinkClose("no answer within cluster-node-timeout");
        } else if (repl.state == LINK_STREAM && now - repl.last_ack_ms >= 1000) {
            replSendAck();
        }
        replMaybeFailover();
    }
    if (repl.backlog && !clusterNodeIsReplica(cs->myself) && server.repl_backlog_ttl > 0) {
        if (repl.nlinks || replReplicasNamed()) {
            repl.no_replicas_since = 0;
        } else if (!repl.no_replicas_since) {
            repl.no_replicas_since = now;
        } else if (now - repl.no_replicas_since > server.repl_backlog_ttl * 1000) {
            /* The stream stops here, so its history ends: a replica that
             * comes back later must not continue past writes it never got. */
            replBacklogFree();
            replNewReplid(0);
            replOn = 0;
            repl.no_replicas_since = 0;
            serverLog(LL_NOTICE, "Replication: no replica for repl-backlog-ttl (%lld s): backlog freed, new "
                      "replication id %s", server.repl_backlog_ttl, repl.replid);
        }
    }
    if (repl.nheld) replCheckHeld();
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

/* ---- INFO ---------------------------------------------------------------- */

int replStandby(char *leader, size_t len) {
    clusterState *cs = server.cluster;
    if (!cs || !clusterNodeIsReplica(cs->myself)) return 0;
    snprintf(leader, len, "%s:%d", repl.host, repl.port);
    return repl.state == LINK_STREAM ? 1 : 2;
}

sds replInfo(sds s) {
    clusterState *cs = server.cluster;
    if (!repl.replid[0]) replNewReplid(0);
    int replica = cs && clusterNodeIsReplica(cs->myself);
    long long now = monoMs();
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
                         "values_read_in_place:%lld\r\n"
                         "sync_failures_in_a_row:%d\r\n"
                         "failover_eligible:%d\r\n",
                         repl.host, repl.port, repl.primary_id, repl.state == LINK_STREAM ? "up" : "down",
                         replLinkStateName[repl.state], repl.last_io_ms ? (now - repl.last_io_ms) / 1000 : -1,
                         repl.state == LINK_SNAPSHOT || repl.state == LINK_HANDSHAKE, repl.applied, repl.applied,
                         repl.state == LINK_STREAM ? 0 : (now - repl.state_since_ms) / 1000, repl.full_syncs_done,
                         repl.records_applied, repl.presized, repl.values_in_place, repl.sync_failures,
                         repl.primary_id[0] && replEligible());
    } else {
        s = sdscatprintf(s, "role:master\r\nconnected_slaves:%d\r\n", repl.nlinks);
        for (int i = 0; i < repl.nlinks; i++) {
            client *c = repl.links[i];
            replicaLink *l = c->repl;
            char ip[NET_ADDR_STR_LEN];
            linkIp(c, ip, sizeof(ip));
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

