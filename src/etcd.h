/* etcd.h -- etcd v3 through its HTTP/JSON gateway, off the event loop.
 *
 * The cluster keeps its topology in etcd (cluster.c). Nothing here may
 * block the event loop: requests are queued to a worker thread that owns
 * the libcurl handles, and each completion is handed back to the loop
 * thread (through a pipe registered in ae) where its callback runs. A
 * watch streams on a second thread of its own, so a long-poll never sits
 * in front of a put.
 *
 * Wire facts (etcd 3.4's gateway): POST /v3/..., keys and values standard
 * base64, 64-bit integers as JSON strings, zero/false fields omitted. See
 * etcd.c for the details.
 */
#ifndef ETCD_H
#define ETCD_H

#include <stddef.h>

#include "ae.h"
#include "sds.h"

typedef struct etcdClient etcdClient;
typedef struct etcdTxn etcdTxn;

typedef struct etcdKV {
    sds key, value;          /* decoded bytes */
    long long create_rev, mod_rev, version, lease;
} etcdKV;

/* What a request came back with. Owned by the library: valid only during
 * the callback. */
typedef struct etcdResult {
    int ok;                  /* 1: an HTTP 200 with a parsable body */
    int http_status;         /* 0 when no HTTP answer came (transport error) */
    int unanswered;          /* !ok, no HTTP status: a try may have reached etcd and its answer
                                was lost (a write may have been applied); 0: none got through */
    const char *err;         /* !ok: why, for a log line or an error reply */
    long long revision;      /* header.revision */
    int succeeded;           /* txn: the compare held */
    etcdKV *kvs;             /* range, or the range ops of a txn in order */
    int nkvs;
    long long deleted;       /* deleterange */
    long long lease_id;      /* lease grant / keepalive */
    long long ttl;           /* lease grant / keepalive; keepalive of a dead lease: 0 */
} etcdResult;

/* Runs on the event loop thread. */
typedef void etcdCallback(const etcdResult *r, void *privdata);

/* One watch event. */
typedef struct etcdEvent {
    int deleted;             /* 1: DELETE, 0: PUT */
    etcdKV kv;               /* for DELETE: key and mod_rev only */
} etcdEvent;

/* Watch status codes passed to the watch callback. */
enum {
    ETCD_WATCH_EVENTS = 0,   /* evs/n hold events, revision = the message's header revision */
    ETCD_WATCH_COMPACTED,    /* the start revision was compacted: re-range, then watch again */
    ETCD_WATCH_DOWN,         /* the stream broke; the library reconnects with backoff */
    ETCD_WATCH_UP            /* (re)connected and the watch was created */
};
/* revision: EVENTS and UP, the message's header revision; COMPACTED, the
 * compact revision; DOWN, 0. Events of one txn come in one call. */
typedef void etcdWatchCallback(int status, const etcdEvent *evs, int n, long long revision, void *privdata);

/* endpoints: "http://127.0.0.1:2379" and so on; requests go to the first
 * that answers and move on to the next on a transport error. NULL on error. */
etcdClient *etcdCreate(aeEventLoop *el, sds *endpoints, int n, char *err, size_t errlen);
/* Stops the threads; callbacks of requests still queued are not run. */
void etcdRelease(etcdClient *ec);

/* A request is retried on transport errors (refused, reset, time-out) with
 * backoff until timeout_ms has passed since it was queued; then its
 * callback gets ok=0. HTTP errors are not retried. */
void etcdSetRequestTimeout(etcdClient *ec, long long timeout_ms);
/* The most bytes kept of one reply, or of one watch message (0: the
 * default, 64 MiB). A larger reply fails its request at once ("reply over
 * N bytes"), a larger watch message drops the stream (it reconnects), so
 * a broken or hostile etcd cannot take all our memory. Set it before the
 * first request; tests lower it. */
void etcdSetReplyLimit(etcdClient *ec, size_t bytes);

/* Range: one key (range_end NULL), or [key, range_end). etcdPrefixEnd
 * gives the range_end of a prefix. */
sds etcdPrefixEnd(const char *prefix, size_t len);
void etcdRange(etcdClient *ec, const char *key, size_t klen, const char *range_end, size_t relen,
               etcdCallback *cb, void *privdata);
void etcdPut(etcdClient *ec, const char *key, size_t klen, const char *val, size_t vlen,
             long long lease, etcdCallback *cb, void *privdata);
void etcdDelete(etcdClient *ec, const char *key, size_t klen, const char *range_end, size_t relen,
                etcdCallback *cb, void *privdata);
void etcdLeaseGrant(etcdClient *ec, long long ttl_seconds, etcdCallback *cb, void *privdata);
void etcdLeaseKeepalive(etcdClient *ec, long long lease_id, etcdCallback *cb, void *privdata);
void etcdLeaseRevoke(etcdClient *ec, long long lease_id, etcdCallback *cb, void *privdata);

/* Transactions: compares (all must hold), then success ops, else failure
 * ops. Range ops' results land in r->kvs in order. */
etcdTxn *etcdTxnCreate(void);
void etcdTxnFree(etcdTxn *t);
/* mod_revision of key == rev; rev 0 means "the key does not exist". */
void etcdTxnCompareModRev(etcdTxn *t, const char *key, size_t klen, long long rev);
void etcdTxnCompareValue(etcdTxn *t, const char *key, size_t klen, const char *val, size_t vlen);
void etcdTxnPut(etcdTxn *t, int on_success, const char *key, size_t klen, const char *val, size_t vlen,
                long long lease);
void etcdTxnDelete(etcdTxn *t, int on_success, const char *key, size_t klen);
void etcdTxnRange(etcdTxn *t, int on_success, const char *key, size_t klen, const char *range_end,
                  size_t relen);
void etcdTxnSubmit(etcdClient *ec, etcdTxn *t, etcdCallback *cb, void *privdata); /* takes t */

/* Streams every change under prefix from start_rev (0: now) until
 * etcdRelease. On a broken stream it reconnects with backoff (up to a
 * second) from the revision after the last one seen. One watch per client. */
int etcdWatchPrefix(etcdClient *ec, const char *prefix, size_t plen, long long start_rev,
                    etcdWatchCallback *cb, void *privdata);
/* After ETCD_WATCH_COMPACTED (or to start over): watch again from rev. */
void etcdWatchRestart(etcdClient *ec, long long start_rev);

#endif
