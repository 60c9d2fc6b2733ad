/* replication_replica.c -- a replica's side of replication (replication.c):
 * the link to its primary, the handshake, and the primary's records applied
 * as they arrive.
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
 * The link is a bare socket (repl.fd) with a read buffer, not a client:
 * what comes over it is a few handshake lines, then the log's records,
 * which the log's own reader (aofNextRecord) parses and checks -- never
 * commands to dispatch. One state machine (LINK_*) says which is next. Its
 * state is the module's (replication_internal.h), not this file's own: the
 * offset applied here and the backlog fed with the stream received become
 * this node's history as a primary when it is promoted
 * (replication_failover.c), so its own replicas continue from it.
 *
 * Large values. A RESTORE record whose value is repl_inplace_min or more
 * (1 MiB) and has not all arrived is not gathered in the read buffer: its head is
 * checked (aofReadRestoreHead), the value's extent taken in the pool, and
 * the socket read straight into it, the CRC64 kept as the bytes come; the
 * trailer after it is checked (aofCheckRestoreTail) before the key sees the
 * object, so a bad value is never applied, as with a whole record. Gathered
 * in the buffer, a value of N bytes cost a second copy of N on the heap,
 * kept after it was applied (the buffer is reused), and the buffer grew by
 * sds's 1 MiB steps, each a realloc copy: a first 256 MiB value took 4 s to
 * apply, and a value of 4 GiB or more could not be held at all (sds
 * lengths are 32-bit), so the replica died. The record still counts as
 * applied, acknowledged and kept in the backlog only once it is whole.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "anet.h"
#include "aofformat.h"
#include "cluster.h"
#include "crc.h"
#include "detached.h"
#include "dict.h"
#include "dump.h"
#include "migrate.h"
#include "prefetch.h"
#include "replication.h"
#include "replication_internal.h"
#include "server.h"
#include "store.h"
#include "util.h"

#define REPL_READ_CHUNK (1024 * 1024)
/* Values from this size on are read straight into the pool ("Large
 * values"), up to REPL_INPLACE_READ bytes per read. A variable so the fuzz
 * target (fuzz_repl.c) can reach that path with small inputs. */
static uint64_t repl_inplace_min = 1024 * 1024;
#define REPL_INPLACE_READ (64 * 1024 * 1024)
/* The longest wait between syncs that keep failing (replLinkClose). */
#define REPL_RETRY_MAX_MS 8000LL
/* The most keys a replica sizes its keyspace for before a full sync's
 * records arrive (128 MiB of buckets); more grow as they come. */
#define REPL_PRESIZE_MAX (16LL * 1024 * 1024)
/* The largest offset a primary may name (2^62 bytes: never reached), so
 * that adding the stream's bytes to it cannot overflow. */
#define REPL_OFFSET_MAX (1LL << 62)
/* snap_left of the "$EOF" form: records until the end marker. */
#define SNAP_UNTIL_MARKER LLONG_MAX

const char *replLinkStateName[] = {"none", "connect", "handshake", "sync", "connected"};

/* ---- the replica's side -------------------------------------------------- */

static void inplaceDrop(void) {
    if (repl.inplace_obj) storeObjDecrRef(repl.inplace_obj);
    sdsfree(repl.inplace_head);
    repl.inplace_obj = NULL;
    repl.inplace_head = NULL;
}

void replLinkClose(const char *why) {
    storePresizeDone(); /* a sync cut short sizes nothing more */
    inplaceDrop(); /* half a value: never applied */
    if (repl.fd != -1) {
        aeDeleteFileEvent(server.el, repl.fd, AE_READABLE | AE_WRITABLE);
        close(repl.fd);
        repl.fd = -1;
    }
    if (repl.state == LINK_STREAM && !repl.link_down_since) repl.link_down_since = monoMs();
    /* A full sync cut short: a replica whose pool cannot hold its
     * primary's data (or that the primary keeps dropping) would start one
     * every 500 ms for ever, each a scan of the primary's whole keyspace
     * and a log line here. Each failure in a row doubles the wait, up to
     * REPL_RETRY_MAX_MS; a sync that completes resets it. */
    if (repl.state == LINK_SNAPSHOT) {
        int n = ++repl.sync_failures;
        long long wait = n >= 5 ? REPL_RETRY_MAX_MS : 500LL << (n - 1);
        if (wait > REPL_RETRY_MAX_MS) wait = REPL_RETRY_MAX_MS;
        repl.next_try_ms = monoMs() + wait;
        if (n > 1)
            serverLog(LL_WARNING, "Replication: %d syncs with %s:%d in a row ended before their end: next try in %lld "
                      "ms", n, repl.host, repl.port, wait);
    }
    /* Unlinked and not alive in etcd (as far as we know), the primary
     * waits for us no more: what it acknowledges now we may lack. */
    if (repl.synced_with[0] && server.cluster && !clusterMyselfAliveInEtcd()) replAliveLapsed();
    /* Logged once per outage, not at every retry. */
    if (repl.state != LINK_NONE && why && !repl.down_logged) {
        serverLog(LL_NOTICE, "Replication: link with primary %s:%d down: %s (retrying every 500 ms)", repl.host,
                  repl.port, why);
        repl.down_logged = 1;
    }
    repl.state = LINK_NONE;
    repl.state_since_ms = monoMs();
    if (repl.rbuf) sdsclear(repl.rbuf);
    repl.rpos = 0;
}

void replSendAck(void) {
    if (repl.fd == -1 || repl.state != LINK_STREAM) return;
    char off[32], msg[96];
    int ol = snprintf(off, sizeof(off), "%lld", repl.applied);
    int n = snprintf(msg, sizeof(msg), "*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$%d\r\n%s\r\n", ol, off);
    /* A full socket drops this ack (the next one says the same and more);
     * half of one would garble the link, so that closes it. */
    ssize_t w = write(repl.fd, msg, (size_t)n);
    if (w == n) {
        repl.last_ack_sent = repl.applied;
        repl.last_ack_ms = monoMs();
    } else if (w > 0) {
        replLinkClose("an acknowledgement did not fit in the socket");
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
            /* each slot's index for its share of the primary's slots */
            clusterNode *p = clusterLookupNode(repl.primary_id, strlen(repl.primary_id));
            storePresize((unsigned long)repl.presize, p && p->numslots > 0 ? p->numslots : CLUSTER_SLOTS);
            repl.presized = repl.presize;
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
    long long now = monoMs();
    if (strcmp(last, why) || now - last_ms > 60000) {
        serverLog(LL_WARNING, "Replication: primary %s:%d refused the sync: %s", repl.host, repl.port, why);
        snprintf(last, sizeof(last), "%s", why);
        last_ms = now;
    }
}

/* Parses what arrived; -1 (the link is closed) on anything unexpected. */
static void badRecord(const char *why) {
    serverLog(LL_WARNING, "Replication: bad record from the primary at offset %lld: %s", repl.applied, why);
}

static void cannotApply(void) {
    serverLog(LL_WARNING, "Replication: cannot apply a record at offset %lld (pool full -- a replica "
              "evicts nothing, so its segment-size and maxmemory must hold its primary's data -- or a bad "
              "payload): dropping the link", repl.applied);
}

/* The record at rbuf[rpos..rpos+lim) has not all arrived. If it is a
 * RESTORE of a large value, its head is taken, the value's extent too, and
 * the value's bytes here go there ("Large values"). 1: so (the value's
 * other bytes are read into the extent); 0: not such a record, or its head
 * not all here yet (read on); -1: bad bytes or no room (the link drops). */
static int inplaceStart(size_t lim) {
    const char *p = repl.rbuf + repl.rpos;
    aofRestoreHead h;
    char why[128];
    int rc = aofReadRestoreHead(p, lim, &h, why, sizeof(why));
    if (rc == AOF_REC_CORRUPT) {
        badRecord(why);
        return -1;
    }
    if (rc != AOF_REC_OK || h.dump.value_len < repl_inplace_min) return 0;
    if (repl.state == LINK_SNAPSHOT && repl.snap_left != SNAP_UNTIL_MARKER && h.total_len > (size_t)repl.snap_left) {
        badRecord("a record longer than the snapshot says");
        return -1;
    }
    sds key = sdsnewlen(h.key, h.keylen);
    /* Every byte comes from the primary before the object is used. */
    storeObj *o = storeObjCreateForFullWrite((size_t)h.dump.value_len, key);
    sdsfree(key);
    if (o == NULL) {
        cannotApply();
        return -1;
    }
    size_t have = lim - h.head_len, take = have < h.dump.value_len ? have : (size_t)h.dump.value_len;
    memcpy(storeObjPtr(o), p + h.head_len, take);
    uint64_t crc = crc64(0, (const unsigned char *)p + h.head_len - h.prefix_len, h.prefix_len);
    repl.inplace_crc = crc64(crc, (const unsigned char *)p + h.head_len, take);
    repl.inplace_head = sdsnewlen(p, h.head_len);
    repl.inplace_obj = o;
    repl.inplace_got = take;
    repl.rpos += h.head_len + take;
    return 1;
}

/* The in-place record once its value is all in: the bytes after the value
 * (avail of them at rbuf[rpos..]) checked, then the record applied as
 * processLinkInput applies a whole one. 1: applied; 0: wait for more;
 * -1: bad bytes (the link drops, the half-read value with it). */
static int inplaceFinish(size_t avail) {
    storeObj *o = repl.inplace_obj;
    if (repl.inplace_got < o->len) return 0; /* linkReadHandler reads into the extent */
    const char *tail = repl.rbuf + repl.rpos;
    char why[128];
    int rc = aofCheckRestoreTail(tail, avail, repl.inplace_crc, why, sizeof(why));
    if (rc == AOF_REC_TRUNCATED) return 0;
    if (rc != AOF_REC_OK) {
        badRecord(why);
        return -1;
    }
    aofRestoreHead h;
    if (aofReadRestoreHead(repl.inplace_head, sdslen(repl.inplace_head), &h, why, sizeof(why)) != AOF_REC_OK)
        return -1; /* it was read so before: cannot happen */
    if (repl.state == LINK_SNAPSHOT) {
        if (repl.snap_left != SNAP_UNTIL_MARKER) repl.snap_left -= (long long)h.total_len;
    } else {
        replBacklogFeed(repl.inplace_head, sdslen(repl.inplace_head));
        replBacklogFeed(storeObjPtr(o), (size_t)o->len);
        replBacklogFeed(tail, AOF_VALUE_TAIL_LEN);
        repl.applied += (long long)h.total_len;
    }
    repl.rpos += AOF_VALUE_TAIL_LEN;
    h.dump.value = storeObjPtr(o);
    sds key = sdsnewlen(h.key, h.keylen);
    dumpObjectDress(o, key, &h.dump);
    storeSet(key, o, h.expire_ms ? h.expire_ms : -1, 0); /* the key holds our reference now */
    sdsfree(key);
    repl.inplace_obj = NULL;
    inplaceDrop();
    repl.records_applied++;
    repl.values_in_place++;
    return 1;
}

/* The most bytes a record read whole may take in the buffer: a value
 * under repl_inplace_min, a key of max-key-size and the rest (expiry,
 * metadata, a SEGMENT's fields) well within 1 MiB. */
static size_t replGatheredMax(void) {
    return (size_t)repl_inplace_min + (size_t)server.max_key_size + 1024 * 1024;
}

static int processLinkInput(void) {
    for (;;) {
        if (repl.inplace_obj) { /* a large value's record ("Large values") */
            int r = inplaceFinish(sdslen(repl.rbuf) - repl.rpos);
            if (r != 1) return r;
            if (repl.state == LINK_SNAPSHOT && repl.snap_left == 0) goto snapshot_done;
            continue;
        }
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
                char id[64], tail;
                long long off;
                if (sscanf(line + 12, "%63s %lld%c", id, &off, &tail) != 2 || !clusterValidId(id) || off < 0 ||
                    off > REPL_OFFSET_MAX)
                    goto bad;
                repl.applied = off;
                snprintf(repl.replid, sizeof(repl.replid), "%.40s", id);
                repl.history = 0;
                replBacklogReset(); /* the stream goes on from off */
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
                if (!repl.backlog) replBacklogReset();
                repl.state = LINK_STREAM;
                repl.state_since_ms = monoMs();
                repl.link_down_since = 0;
                repl.down_logged = 0;
                repl.partial_syncs_done++;
                repl.sync_failures = 0;
                snprintf(repl.synced_with, sizeof(repl.synced_with), "%s", repl.primary_id);
                serverLog(LL_NOTICE, "Replication: partial resync from %s:%d accepted: continuing from offset %lld",
                          repl.host, repl.port, repl.applied);
                replSendAck(); /* held writes (cluster-replica-ack) need not wait for the next second */
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
                repl.snap_left = SNAP_UNTIL_MARKER;
                continue;
            }
            if (line[0] != '$' || !string2ll(line + 1, len - 1, &n) || n < 0 || n == SNAP_UNTIL_MARKER) goto bad;
            repl.snap_left = n;
            continue;
        }
        if (repl.state == LINK_SNAPSHOT && repl.snap_left == SNAP_UNTIL_MARKER && repl.rpos < sdslen(repl.rbuf) &&
            repl.rbuf[repl.rpos] == '+') {
            /* A record starts with '*': this is the end marker. The stream
             * goes on from its offset; what came before it (the live records
             * sent between the slices) is applied but is not the stream's. */
            size_t len;
            int toolong;
            char *line = takeLine(&len, &toolong);
            if (!line) return toolong ? -1 : 0;
            long long off;
            if (strncmp(line, "+SNAPSHOT-END ", 14) || !string2ll(line + 14, len - 14, &off) || off < repl.applied ||
                off > REPL_OFFSET_MAX)
                goto bad;
            repl.applied = off;
            replBacklogReset();
            goto snapshot_done;
        }
        /* records: the snapshot's, then the stream's */
        /* A counted snapshot of no bytes ("$0") is complete now, not when
         * the first live record happens to arrive. */
        if (repl.state == LINK_SNAPSHOT && repl.snap_left == 0) goto snapshot_done;
        size_t avail = sdslen(repl.rbuf) - repl.rpos;
        if (avail == 0) return 0;
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
            if (lim < avail) {
                badRecord("a record longer than the snapshot says");
                return -1;
            }
            int r = inplaceStart(lim);
            if (r == 1) continue;
            if (r == -1) return -1;
            /* Gathered whole: bounded, or a primary that announces a part
             * it never ends grows the buffer for ever. */
            if (avail > replGatheredMax()) {
                badRecord("a record longer than this node takes whole (a value under 1 MiB and a key within "
                          "max-key-size: is the primary's max-key-size larger?)");
                return -1;
            }
            return 0;
        }
        if (rc != AOF_REC_OK) {
            badRecord(why);
            return -1;
        }
        if (applyRecord(&rec) == -1) {
            cannotApply();
            return -1;
        }
        if (repl.state == LINK_SNAPSHOT) {
            repl.rpos += next;
            if (repl.snap_left == SNAP_UNTIL_MARKER) continue;
            repl.snap_left -= (long long)next;
            if (repl.snap_left == 0) goto snapshot_done;
        } else {
            /* The stream's bytes, as they came: kept for our own replicas'
             * partial resyncs should this node be promoted. */
            replBacklogFeed(repl.rbuf + repl.rpos, next);
            repl.rpos += next;
            repl.applied += (long long)next;
        }
        continue;
    snapshot_done:
        storePresizeDone();
        repl.state = LINK_STREAM;
        repl.state_since_ms = monoMs();
        repl.link_down_since = 0;
        repl.down_logged = 0;
        repl.full_syncs_done++;
        repl.sync_failures = 0;
        repl.history = 1;
        snprintf(repl.synced_with, sizeof(repl.synced_with), "%s", repl.primary_id);
        serverLog(LL_NOTICE, "Replication: full sync from %s:%d done (%llu keys), streaming from offset %lld",
                  repl.host, repl.port, (unsigned long long)storeSize(), repl.applied);
        replSendAck(); /* held writes (cluster-replica-ack) need not wait for the next second */
        continue;
    }
bad:
    serverLog(LL_WARNING, "Replication: unexpected bytes from primary %s:%d in state %s", repl.host, repl.port,
              replLinkStateName[repl.state]);
    return -1;
}

static void linkReadHandler(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el, (void)privdata, (void)mask;
    if (!repl.rbuf) repl.rbuf = sdsempty();
    if (repl.rpos > 0 && (repl.rpos == sdslen(repl.rbuf) || repl.rpos > 4 * 1024 * 1024)) {
        sdsrange(repl.rbuf, (ssize_t)repl.rpos, -1);
        repl.rpos = 0;
    }
    storeObj *o = repl.inplace_obj;
    ssize_t n;
    if (o && repl.inplace_got < o->len) {
        /* A large value's next bytes, straight into its extent. */
        char *dst = storeObjPtr(o) + repl.inplace_got;
        uint64_t want = o->len - repl.inplace_got;
        n = read(fd, dst, want < REPL_INPLACE_READ ? (size_t)want : REPL_INPLACE_READ);
        if (n > 0) {
            repl.inplace_crc = crc64(repl.inplace_crc, (const unsigned char *)dst, (size_t)n);
            repl.inplace_got += (uint64_t)n;
        }
    } else {
        repl.rbuf = sdsMakeRoomFor(repl.rbuf, REPL_READ_CHUNK);
        n = read(fd, repl.rbuf + sdslen(repl.rbuf), REPL_READ_CHUNK);
        if (n > 0) sdsIncrLen(repl.rbuf, n);
    }
    if (n <= 0) {
        if (n == -1 && (errno == EAGAIN || errno == EINTR)) return;
        replLinkClose(n == 0 ? "closed by the primary" : strerror(errno));
        return;
    }
    server.stat_net_input_bytes += n;
    repl.last_io_ms = monoMs();
    long long before = repl.applied;
    if (processLinkInput() == -1) {
        replLinkClose("protocol error");
        return;
    }
    if (repl.applied != before) replSendAck();
}

static void linkConnected(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el, (void)privdata, (void)mask;
    int err = 0;
    socklen_t el_ = sizeof(err);
    aeDeleteFileEvent(server.el, fd, AE_WRITABLE);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el_) == -1 || err) {
        replLinkClose(strerror(err ? err : errno));
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
        replLinkClose("cannot send the handshake");
        return;
    }
    repl.state = LINK_HANDSHAKE;
    repl.state_since_ms = monoMs();
    aeCreateFileEvent(server.el, fd, AE_READABLE, linkReadHandler, NULL);
}

void replLinkConnect(void) {
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
    repl.state_since_ms = monoMs();
    repl.last_io_ms = monoMs();
    if (aeCreateFileEvent(server.el, fd, AE_WRITABLE, linkConnected, NULL) == AE_ERR) replLinkClose("event loop full");
}
