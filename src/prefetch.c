/* prefetch.c -- fetch the keys of a pipeline's commands before running them.
 *
 * Why. A pipelined small command (INCR, GET, SET over 100k random keys)
 * spends most of its time waiting for memory, not computing: the bucket
 * slot in the keyspace table, the dict entry, the key's sds, the 48-byte
 * value header and the pool line holding the value are each a cache miss,
 * taken one after the other because each address comes from the previous
 * load. perf put dictLookup at 15-20 % and storeLookupWrite at 7-10 % of a
 * pipelined INCR profile. Redis pays the same misses; Valkey 8 hides them
 * by looking at a batch of parsed commands first and prefetching their
 * keys, so that the misses of the whole batch overlap instead of being
 * paid in series ("memory prefetching").
 *
 * How. When a client's query buffer starts a request, prefetchPipeline()
 * scans the RESP requests that are already complete in the buffer (up to
 * PREFETCH_BATCH of them, without copying anything and without touching
 * the parser's state) and, if there are at least two, walks their first
 * keys through the keyspace in stages: all bucket slots, then all bucket
 * heads, then every head's key and value header, then every value's pool
 * line. Each stage only issues prefetches for the batch, so while one
 * key's line is on its way the others are requested too; the loads of a
 * stage find the lines the previous stage asked for. Then processInputBuffer
 * parses and runs the commands as always, and their lookups hit the cache.
 *
 * Safety. Nothing here changes any state, and nothing is kept: the batch
 * runs to its end before any command of it executes, so every pointer it
 * follows (table slot -> entry -> key, value header -> segment) is read
 * from a structure that is live at that moment. Prefetching an address
 * never faults and never changes what a later lookup finds: a command
 * that deletes a key, rehashes the table or frees a value before the next
 * one runs makes a prefetch useless, never wrong. The scan stops at
 * anything it does not fully recognise (an inline request, a malformed
 * header, an argument read in place, a request not yet complete); those
 * are handled by the parser as before, only without the head start.
 *
 * A single request in the buffer (no pipelining) costs one scan of its
 * header bytes and nothing else: prefetching a key just before its own
 * lookup would buy nothing and cost the hash.
 *
 * A replica applies its primary's records the same way (prefetchRequests,
 * from replication_replica.c): they are RESP requests too (RESTORE key ..., DEL
 * key), and a full sync inserts millions of them, each a miss on its
 * bucket and chain.
 */
#include "prefetch.h"

#include <string.h>

#include "dict.h"
#include "server.h"
#include "store.h"

/* Enough to cover a typical pipeline (-P 16) in one pass, few enough that
 * the first lines asked for are still in L1 when their command runs. */
#define PREFETCH_BATCH 16
/* Requests with more arguments than this end the scan: walking every
 * header of an MSET of thousands of keys twice would cost more than the
 * misses it hides, and only its first key would be prefetched anyway. */
#define PREFETCH_MAX_ARGS 16
/* Arguments that firstkey may name (GET key: 1; a few commands: 2 or 3). */
#define PREFETCH_ARGS_KEPT 3
/* Values up to this long have their first pool line prefetched; a longer
 * one is copied or sent in place, where one line is no head start. */
#define PREFETCH_VALUE_MAX 512

typedef struct pfReq {
    const char *name;
    size_t namelen;
    int argc;
    const char *arg[PREFETCH_ARGS_KEPT + 1]; /* arg[i]: argument i, i >= 1 */
    size_t arglen[PREFETCH_ARGS_KEPT + 1];
} pfReq;

/* Parses a "\r\n"-terminated decimal at *pos (after its type byte). Only
 * the forms the parser accepts for a small request; anything else (a sign,
 * an overlong number, a missing CRLF) returns -1 and ends the scan. */
static long long scanNumber(const char *buf, size_t len, size_t *pos) {
    size_t p = *pos;
    long long v = 0;
    int digits = 0;
    while (p < len && buf[p] >= '0' && buf[p] <= '9') {
        if (++digits > 9) return -1;
        v = v * 10 + (buf[p] - '0');
        p++;
    }
    if (digits == 0 || p + 1 >= len || buf[p] != '\r' || buf[p + 1] != '\n') return -1;
    *pos = p + 2;
    return v;
}

/* Fills reqs with the complete multibulk requests at the head of buf;
 * returns how many. */
static int scanRequests(const char *buf, size_t len, pfReq *reqs, int max) {
    size_t pos = 0;
    int n = 0;
    while (n < max && pos < len && buf[pos] == '*') {
        pos++;
        long long argc = scanNumber(buf, len, &pos);
        if (argc < 1 || argc > PREFETCH_MAX_ARGS) break;
        pfReq *r = &reqs[n];
        r->argc = (int)argc;
        int j;
        for (j = 0; j < argc; j++) {
            if (pos >= len || buf[pos] != '$') break;
            pos++;
            long long blen = scanNumber(buf, len, &pos);
            /* Big arguments are read in place by the caller, not from here. */
            if (blen < 0 || blen >= PROTO_BIG_ARG || len - pos < (size_t)blen + 2) break;
            if (buf[pos + blen] != '\r' || buf[pos + blen + 1] != '\n') break;
            if (j == 0) {
                r->name = buf + pos;
                r->namelen = (size_t)blen;
            } else if (j <= PREFETCH_ARGS_KEPT) {
                r->arg[j] = buf + pos;
                r->arglen[j] = (size_t)blen;
            }
            pos += (size_t)blen + 2;
        }
        if (j < argc) break;
        n++;
    }
    return n;
}

int prefetchPipeline(client *c) {
    /* An anonymous peer's requests are refused: nothing to fetch for them.
     * Once AUTH has run, the next request starts a batch again. */
    if (!c->authenticated) return 0;
    int max = server.prefetch_batch < PREFETCH_BATCH ? (int)server.prefetch_batch : PREFETCH_BATCH;
    return prefetchRequests(c->querybuf + c->qb_pos, sdslen(c->querybuf) - c->qb_pos, max);
}

int prefetchRequests(const char *buf, size_t len, int max) {
    pfReq reqs[PREFETCH_BATCH];
    if (max > PREFETCH_BATCH) max = PREFETCH_BATCH;
    int n = scanRequests(buf, len, reqs, max);
    if (n < 2) return n;

    dict *keys = server.keys, *expires = server.expires;
    int with_expires = dictSize(expires) != 0; /* as expireIfNeeded skips it */
    uint64_t hash[PREFETCH_BATCH];
    const char *kp[PREFETCH_BATCH];
    size_t kl[PREFETCH_BATCH];
    dictEntry *de[PREFETCH_BATCH];
    int nk = 0;

    /* 1: hash each first key, ask for its bucket slot(s). */
    for (int i = 0; i < n; i++) {
        /* The names a pipeline repeats are found without hashing
         * (lookupCommandBuf's cache, server.c). */
        serverCommand *cmd = lookupCommandBuf(reqs[i].name, reqs[i].namelen);
        if (cmd == NULL || cmd->subcommands || cmd->firstkey < 1 || cmd->firstkey > PREFETCH_ARGS_KEPT ||
            cmd->firstkey >= reqs[i].argc)
            continue;
        kp[nk] = reqs[i].arg[cmd->firstkey];
        kl[nk] = reqs[i].arglen[cmd->firstkey];
        hash[nk] = storeKeyHashBuf(kp[nk], kl[nk]);
        dictPrefetchBucket(keys, hash[nk]);
        if (with_expires) dictPrefetchBucket(expires, hash[nk]);
        nk++;
    }
    server.stat_prefetch_batches++;
    server.stat_prefetch_keys += nk;
    if (nk == 0) return n;

    /* 2: the slots have arrived (or are arriving): ask for the first entry
     * of each bucket, in the expires table too. */
    for (int i = 0; i < nk; i++) {
        de[i] = dictBucketHead(keys, hash[i]);
        if (de[i]) __builtin_prefetch(de[i]);
        if (with_expires) {
            dictEntry *e = dictBucketHead(expires, hash[i]);
            if (e) __builtin_prefetch(e);
        }
    }

    /* 3: its key, to compare, and the entry after it: at the usual load
     * factor a third of the keys are not first in their bucket, and the
     * second entry costs nothing more to find (same line as the key). */
    for (int i = 0; i < nk; i++) {
        if (de[i] == NULL) continue;
        __builtin_prefetch((char *)de[i]->key - sizeof(struct sdshdr));
        if (de[i]->next) __builtin_prefetch(de[i]->next);
    }

    /* 4: find the key's entry as the lookup will, and ask for its value
     * header: 48 bytes that may straddle two lines, so both. A longer
     * chain costs a miss here, once, instead of one in the command. */
    for (int i = 0; i < nk; i++) {
        dictEntry *d = de[i];
        while (d && !(sdslen(d->key) == kl[i] && memcmp(d->key, kp[i], kl[i]) == 0)) d = d->next;
        de[i] = d;
        if (d == NULL) continue;
        __builtin_prefetch(d->val);
        __builtin_prefetch((char *)d->val + sizeof(storeObj) - 1);
    }

    /* 5: the value's bytes in the pool, for the commands that read or
     * update them (GET, INCR, APPEND): asked for writing, as INCR changes
     * them in place and a read gets the line just the same. And the
     * key's TTL entry, found by the key's pointer: the expires table
     * shares the keyspace's key sds. */
    for (int i = 0; i < nk; i++) {
        if (de[i] == NULL) continue;
        storeObj *o = de[i]->val;
        if (o && o->len > 0 && o->len <= PREFETCH_VALUE_MAX && o->r.handle != ALLOC_NONE) {
            segment *seg = storeReplicaSegment(&o->r);
            if (seg && seg->mem) __builtin_prefetch(segmentPtr(seg, o->r.offset), 1);
        }
        if (with_expires) {
            dictEntry *e = dictBucketHead(expires, hash[i]);
            if (e && e->key != de[i]->key && (e = e->next) != NULL) __builtin_prefetch(e);
        }
    }
    return n;
}
