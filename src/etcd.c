/* etcd.c -- an etcd v3 client for the event loop, over etcd's HTTP/JSON gateway.
 *
 * Why the gateway: etcd speaks gRPC, and a gRPC stack in C would be a far
 * larger dependency than libcurl plus jansson. The gateway maps every v3
 * call to POST /v3/<service>/<method> with the protobuf's JSON form, which
 * is all cluster mode needs: range, put, delete, txn, leases and a watch.
 *
 * Why threads: nothing may block the event loop, and libcurl's easy
 * interface blocks. Two threads do all the network I/O:
 *
 *   - the worker owns one CURL easy handle inside a multi handle and serves
 *     a FIFO of requests (ec->pending, mutex + condvar). The handle is
 *     reused, so the TCP connection to etcd stays open between requests (a
 *     fresh connection per put costs about twice as much). One request at a
 *     time is plenty for cluster metadata, and FIFO order means a put queued
 *     after another put lands after it.
 *   - the watcher owns a second handle for the one long-lived watch stream,
 *     so a long poll never sits in front of a put.
 *
 * Both hand their results back through ec->done and a byte written to a
 * pipe whose read end is a file event of the loop; etcdOnPipe then runs
 * the callbacks on the loop thread, so the caller never sees a lock. A
 * callback never runs inside the call that queued its request, even for a
 * request refused locally.
 *
 * Why curl_multi for a single transfer: curl_multi_poll() can be woken by
 * curl_multi_wakeup() from another thread, so etcdRelease stops a transfer
 * or a backoff sleep at once instead of waiting for a progress callback or
 * a time-out.
 *
 * Failures: a transport error (refused, reset, time-out, empty reply) is
 * retried with backoff, moving to the next endpoint, until the request's
 * deadline (etcdSetRequestTimeout, counted from when it was queued). An
 * HTTP error is etcd's answer and is not retried. A write whose reply was
 * lost may have been applied: the retry of a compare-and-swap then fails
 * its compare, so a caller that sees a failed CAS after a restart of etcd
 * re-reads before it concludes that it lost. With one endpoint, a request
 * that was sent is given the whole budget rather than re-sent (etcdExecute).
 * A reply, or a watch message, larger than the reply limit is cut off as it
 * arrives (memory stays bounded whatever answers on etcd's port): the
 * request fails at once, the watch reconnects.
 *
 * Wire facts (etcd 3.4.23, checked by experiment): keys and values are
 * standard base64; every 64-bit integer comes back as a JSON string; zero
 * and false fields are omitted (a failed txn has no "succeeded", a range
 * miss no "kvs", a keepalive of a dead lease no "TTL"); errors are 4xx/5xx
 * with {"error","message","code"}. A watch answers one JSON object per line
 * on a chunked response; a watch from a compacted revision first says
 * "created" and then "canceled" with "compact_revision", and keeps the
 * response open, so we close it ourselves.
 */
#include "etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"
#include "zmalloc.h"

#define ETCD_MAX_REQUEST (1536 * 1024) /* etcd's default --max-request-bytes */
#define ETCD_OP_OVERHEAD 64            /* protobuf framing per key/op, a generous guess */
#define ETCD_DEFAULT_TIMEOUT_MS 5000
#define ETCD_CONNECT_TIMEOUT_MS 1000   /* per attempt: a dead endpoint must not eat the budget */
#define ETCD_ATTEMPT_TIMEOUT_MS 2000
#define ETCD_BACKOFF_MIN_MS 50
#define ETCD_BACKOFF_MAX_MS 1000
/* A silent watch stream is normal: etcd's progress notifications come every
 * 10 minutes by default. TCP keepalive notices a vanished host in under a
 * minute; the low-speed limit catches an etcd that is alive but hung. */
#define ETCD_WATCH_SILENCE_S 660
#define ETCD_STOPPED (-1)   /* etcdPerform: etcdRelease (or a watch restart) cut it short */
/* The most we buffer of one reply, or of one watch message before its
 * newline. Nothing we ask for comes near it (etcd refuses requests over
 * 1.5 MiB, so a range of our prefix or a watch message of one txn is a few
 * MiB at most); without a bound, an etcd (or whatever answers on its port)
 * that streams an endless body would take all our memory. */
#define ETCD_DEFAULT_REPLY_LIMIT (64 * 1024 * 1024)

enum { OP_RANGE, OP_PUT, OP_DELETE, OP_TXN, OP_GRANT, OP_KEEPALIVE, OP_REVOKE, OP_WATCH };
static const char *etcdOpPath[] = {"/v3/kv/range",    "/v3/kv/put",          "/v3/kv/deleterange",
                                   "/v3/kv/txn",      "/v3/lease/grant",     "/v3/lease/keepalive",
                                   "/v3/lease/revoke", "/v3/watch"};

/* One request on its way to etcd and back, or one watch message on its way
 * to the loop. */
typedef struct etcdOp {
    struct etcdOp *next;
    int type;
    sds body;                /* the JSON request; NULL when refused locally */
    long long deadline_us;   /* monotonic; retries stop here */
    etcdCallback *cb;
    void *privdata;
    etcdResult r;            /* filled by the worker */
    sds err;                 /* backs r.err */
    /* OP_WATCH only */
    int wstatus;
    etcdEvent *evs;
    int nevs;
    long long wrev, wgen;
} etcdOp;

/* A thread's libcurl state: the easy handle lives in the multi between
 * transfers, so the multi's connection cache keeps the TCP connection. */
typedef struct etcdConn {
    CURLM *multi;
    CURL *easy;
    sds buf;                 /* the reply body, or the watch stream's unparsed tail */
    size_t limit;            /* buf never grows past it (ec->reply_limit) */
    int overflow;            /* the transfer was cut because buf would have */
    char errbuf[CURL_ERROR_SIZE];
} etcdConn;

struct etcdClient {
    aeEventLoop *el;
    sds *endpoints;
    int nendpoints;
    long long timeout_ms;
    size_t reply_limit;
    struct curl_slist *headers;
    int pipefd[2];           /* threads -> loop: "ec->done has something" */
    int in_callback, release_pending; /* etcdRelease from inside a callback */

    pthread_mutex_t lock;    /* guards the queues and the w* fields marked so */
    pthread_cond_t cond;
    atomic_int stopping;
    etcdOp *pending, *pending_tail; /* loop -> worker */
    etcdOp *done, *done_tail;       /* threads -> loop */

    /* The worker's own state. */
    pthread_t worker;
    etcdConn conn;
    int cur;                 /* the endpoint to try first */
    sds lasterr;             /* the last transport error; NULL once etcd answered */

    /* The watch. wkey/wend/wcb/wpriv are set before the thread starts. */
    int watching;
    pthread_t watcher;
    etcdConn wconn;
    sds wkey, wend;
    etcdWatchCallback *wcb;
    void *wpriv;
    long long wrev;          /* lock: where to (re)start, 0 = now */
    int wpaused;             /* lock: compacted, until etcdWatchRestart */
    _Atomic long long wgen;  /* bumped by etcdWatchRestart; written under lock */
};

/* ---- JSON helpers ---------------------------------------------------------- */

static json_t *etcdJsonBytes(const char *p, size_t len) {
    sds b = base64Encode(p, len);
    json_t *j = json_stringn(b, sdslen(b));
    sdsfree(b);
    return j;
}

static int etcdDumpCb(const char *buf, size_t size, void *data) {
    *(sds *)data = sdscatlen(*(sds *)data, buf, size);
    return 0;
}

/* Serializes and releases j. jansson keeps its own allocator: we do not
 * call json_set_alloc_funcs, as that would change it for the whole process. */
static sds etcdJsonDump(json_t *j) {
    sds s = sdsempty();
    if (json_dump_callback(j, etcdDumpCb, &s, JSON_COMPACT) != 0) sdsclear(s);
    json_decref(j);
    return s;
}

/* A 64-bit integer field: protobuf's JSON mapping writes it as a string,
 * and some paths as a number; both must parse whole. Missing means 0. */
static int etcdGetInt(json_t *obj, const char *name, long long *out) {
    json_t *v = json_object_get(obj, name);
    *out = 0;
    if (v == NULL) return 0;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    if (!json_is_string(v)) return -1;
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (len == 0 || len > 20 || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end != s + len) return -1;
    *out = x;
    return 0;
}

/* A bytes field: base64 in a string; missing means empty. NULL if bad. */
static sds etcdGetBytes(json_t *obj, const char *name) {
    json_t *v = json_object_get(obj, name);
    if (v == NULL) return sdsempty();
    if (!json_is_string(v)) return NULL;
    return base64Decode(json_string_value(v), json_string_length(v));
}

static void etcdFreeKVs(etcdKV *kvs, int n) {
    for (int i = 0; i < n; i++) {
        sdsfree(kvs[i].key);
        sdsfree(kvs[i].value);
    }
    zfree(kvs);
}

/* One mvccpb.KeyValue. On error *what names the bad part. */
static int etcdParseKV(json_t *j, etcdKV *kv, const char **what) {
    memset(kv, 0, sizeof(*kv));
    *what = "a kv is not an object";
    if (!json_is_object(j)) return -1;
    *what = "kv.key or kv.value is not base64";
    if ((kv->key = etcdGetBytes(j, "key")) == NULL) return -1;
    if ((kv->value = etcdGetBytes(j, "value")) == NULL) return -1;
    *what = "a kv revision, version or lease is not an integer";
    if (etcdGetInt(j, "create_revision", &kv->create_rev) || etcdGetInt(j, "mod_revision", &kv->mod_rev) ||
        etcdGetInt(j, "version", &kv->version) || etcdGetInt(j, "lease", &kv->lease))
        return -1;
    return 0;
}

/* Appends the kvs array of obj (if any) to *kvs / *n. */
static int etcdParseKVs(json_t *obj, etcdKV **kvs, int *n, const char **what) {
    json_t *arr = json_object_get(obj, "kvs");
    if (arr == NULL) return 0;
    *what = "kvs is not an array";
    if (!json_is_array(arr)) return -1;
    size_t add = json_array_size(arr);
    if (add == 0) return 0;
    *kvs = zrealloc(*kvs, sizeof(etcdKV) * (*n + add));
    for (size_t i = 0; i < add; i++) {
        int rc = etcdParseKV(json_array_get(arr, i), &(*kvs)[*n], what);
        (*n)++; /* counted even when half-parsed, so etcdFreeKVs frees it */
        if (rc) return -1;
    }
    return 0;
}

/* ---- replies --------------------------------------------------------------- */

static void etcdSetErr(etcdOp *op, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sdsfree(op->err);
    op->err = sdscatvprintf(sdsempty(), fmt, ap);
    va_end(ap);
}

/* The type-specific part of a 200 reply. */
static int etcdParseBody(etcdOp *op, json_t *root, const char **what) {
    etcdResult *r = &op->r;
    json_t *res;
    switch (op->type) {
    case OP_RANGE: return etcdParseKVs(root, &r->kvs, &r->nkvs, what);
    case OP_DELETE:
        *what = "deleted is not an integer";
        return etcdGetInt(root, "deleted", &r->deleted);
    case OP_TXN:
        r->succeeded = json_is_true(json_object_get(root, "succeeded"));
        res = json_object_get(root, "responses");
        *what = "responses is not an array";
        if (res && !json_is_array(res)) return -1;
        for (size_t i = 0; res && i < json_array_size(res); i++) {
            json_t *range = json_object_get(json_array_get(res, i), "response_range");
            if (range && etcdParseKVs(range, &r->kvs, &r->nkvs, what)) return -1;
        }
        return 0;
    case OP_GRANT:
    case OP_KEEPALIVE:
        /* keepalive is a streaming call: its reply is {"result":{...}}. */
        res = op->type == OP_GRANT ? root : json_object_get(root, "result");
        *what = "no result in a keepalive reply";
        if (!json_is_object(res)) return -1;
        *what = "ID or TTL is not an integer";
        return etcdGetInt(res, "ID", &r->lease_id) || etcdGetInt(res, "TTL", &r->ttl) ? -1 : 0;
    default: return 0; /* put, revoke: just the header */
    }
}

/* The message of an error body: {"message"} or {"error"}, the latter also
 * as an object on streaming calls. */
static const char *etcdErrorMessage(json_t *root) {
    json_t *e = json_object_get(root, "error");
    if (json_is_object(e)) root = e;
    const char *msg = json_string_value(json_object_get(root, "message"));
    if (msg == NULL || !msg[0]) msg = json_string_value(json_object_get(root, "error"));
    return msg && msg[0] ? msg : NULL;
}

static void etcdParseReply(etcdOp *op, long status, const char *body, size_t len) {
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    const char *what = NULL, *msg;
    op->r.http_status = (int)status;
    if (status != 200) {
        msg = json_is_object(root) ? etcdErrorMessage(root) : NULL;
        if (msg) etcdSetErr(op, "%s", msg);
        else etcdSetErr(op, "etcd answered HTTP %ld", status);
        goto done;
    }
    if (!json_is_object(root)) {
        etcdSetErr(op, "malformed reply from etcd: %s", root ? "not an object" : jerr.text);
        goto done;
    }
    if ((msg = etcdErrorMessage(root)) != NULL) { /* LeaseGrant's "error", a stream's error */
        etcdSetErr(op, "%s", msg);
        goto done;
    }
    what = "header.revision is not an integer";
    json_t *hdr = json_object_get(root, "header");
    if (op->type == OP_KEEPALIVE) hdr = json_object_get(json_object_get(root, "result"), "header");
    if (etcdGetInt(hdr, "revision", &op->r.revision) || etcdParseBody(op, root, &what)) {
        etcdSetErr(op, "malformed reply from etcd: %s", what);
        goto done;
    }
    op->r.ok = 1;
done:
    if (!op->r.ok) { /* no half-parsed data behind an error */
        etcdFreeKVs(op->r.kvs, op->r.nkvs);
        memset(&op->r, 0, sizeof(op->r));
        op->r.http_status = (int)status;
    }
    if (root) json_decref(root);
}

/* ---- queues and the loop side ---------------------------------------------- */

static void etcdPush(etcdOp **head, etcdOp **tail, etcdOp *op) {
    op->next = NULL;
    if (*tail) (*tail)->next = op;
    else *head = op;
    *tail = op;
}

static void etcdOpFree(etcdOp *op) {
    sdsfree(op->body);
    sdsfree(op->err);
    etcdFreeKVs(op->r.kvs, op->r.nkvs);
    for (int i = 0; i < op->nevs; i++) {
        sdsfree(op->evs[i].kv.key);
        sdsfree(op->evs[i].kv.value);
    }
    zfree(op->evs);
    zfree(op);
}

static void etcdFreeList(etcdOp *op) {
    while (op) {
        etcdOp *next = op->next;
        etcdOpFree(op);
        op = next;
    }
}

/* Any thread: hand op to the loop. Only the first op into an empty queue
 * writes the pipe; etcdOnPipe takes the whole queue under the same lock,
 * so no wake-up is lost and the pipe never fills. */
static void etcdComplete(etcdClient *ec, etcdOp *op) {
    pthread_mutex_lock(&ec->lock);
    int wake = ec->done == NULL;
    etcdPush(&ec->done, &ec->done_tail, op);
    if (wake && write(ec->pipefd[1], "x", 1) == -1) {
        /* EAGAIN: a byte is waiting already. */
    }
    pthread_mutex_unlock(&ec->lock);
}

static void etcdRunCallback(etcdClient *ec, etcdOp *op) {
    if (op->type != OP_WATCH) {
        op->r.err = op->err;
        if (op->cb) op->cb(&op->r, op->privdata);
    } else if (op->wgen == ec->wgen) { /* else: from before an etcdWatchRestart */
        ec->wcb(op->wstatus, op->evs, op->nevs, op->wrev, ec->wpriv);
    }
}

static void etcdOnPipe(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el;
    (void)mask;
    etcdClient *ec = privdata;
    char buf[64];
    while (read(fd, buf, sizeof(buf)) > 0) {}
    pthread_mutex_lock(&ec->lock);
    etcdOp *list = ec->done;
    ec->done = ec->done_tail = NULL;
    pthread_mutex_unlock(&ec->lock);

    ec->in_callback = 1;
    while (list && !ec->release_pending) {
        etcdOp *op = list;
        list = op->next;
        etcdRunCallback(ec, op);
        etcdOpFree(op);
    }
    ec->in_callback = 0;
    etcdFreeList(list);
    if (ec->release_pending) etcdRelease(ec);
}

/* ---- transfers (worker and watcher) ---------------------------------------- */

static size_t etcdWriteBody(char *data, size_t size, size_t nmemb, void *priv) {
    etcdConn *c = priv;
    if (sdslen(c->buf) + size * nmemb > c->limit) {
        c->overflow = 1;
        return 0; /* libcurl ends the transfer: CURLE_WRITE_ERROR */
    }
    c->buf = sdscatlen(c->buf, data, size * nmemb);
    return size * nmemb;
}

static int etcdConnInit(etcdClient *ec, etcdConn *c) {
    c->buf = sdsempty();
    c->limit = ec->reply_limit;
    if ((c->multi = curl_multi_init()) == NULL || (c->easy = curl_easy_init()) == NULL) return -1;
    CURL *e = c->easy;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L); /* we are threaded */
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, ec->headers);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, etcdWriteBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 10L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 5L);
    return 0;
}

static void etcdConnFree(etcdConn *c) {
    if (c->easy) curl_easy_cleanup(c->easy);
    if (c->multi) curl_multi_cleanup(c->multi);
    sdsfree(c->buf);
}

static long long etcdMsUntil(long long when_us) { return (when_us - aeMonotonicUs()) / 1000; }

/* Runs the transfer set up on c->easy to its end: a CURLcode, or
 * ETCD_STOPPED when etcdRelease (or, given gen, etcdWatchRestart) came
 * first. curl_multi_poll also honours libcurl's own time-outs. */
static int etcdPerform(etcdClient *ec, etcdConn *c, const long long *gen) {
    int running = 1, rc = ETCD_STOPPED, left;
    curl_multi_add_handle(c->multi, c->easy);
    while (!atomic_load(&ec->stopping) && (gen == NULL || *gen == atomic_load(&ec->wgen))) {
        curl_multi_perform(c->multi, &running);
        if (!running) {
            CURLMsg *m = curl_multi_info_read(c->multi, &left);
            rc = m && m->msg == CURLMSG_DONE ? (int)m->data.result : CURLE_GOT_NOTHING;
            break;
        }
        curl_multi_poll(c->multi, NULL, 0, 1000, NULL);
    }
    curl_multi_remove_handle(c->multi, c->easy);
    return rc;
}

/* Backoff that etcdRelease can interrupt. */
static void etcdSleep(etcdClient *ec, etcdConn *c, long long ms) {
    long long until = aeMonotonicUs() + ms * 1000;
    long long left;
    while (!atomic_load(&ec->stopping) && (left = etcdMsUntil(until)) > 0)
        curl_multi_poll(c->multi, NULL, 0, (int)left, NULL);
}

static void etcdSetPost(etcdClient *ec, etcdConn *c, int ep, const char *path, sds body) {
    sds url = sdscat(sdsdup(ec->endpoints[ep]), path);
    curl_easy_setopt(c->easy, CURLOPT_URL, url); /* libcurl copies it */
    sdsfree(url);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)sdslen(body));
    sdsfree(c->buf);
    c->buf = sdsempty(); /* a large reply's room is not kept for the next */
    c->overflow = 0;
    c->errbuf[0] = '\0';
}

/* "http://host:port: Connection refused": the OS's word where there is
 * one, it is shorter and clearer than libcurl's. */
static sds etcdTransportError(etcdClient *ec, etcdConn *c, int ep, int rc) {
    long oserr = 0;
    char tmp[128];
    const char *why = c->errbuf[0] ? c->errbuf : curl_easy_strerror((CURLcode)rc);
    curl_easy_getinfo(c->easy, CURLINFO_OS_ERRNO, &oserr);
    if (oserr && (rc == CURLE_COULDNT_CONNECT || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR))
        why = strerror_r((int)oserr, tmp, sizeof(tmp));
    return sdscatprintf(sdsempty(), "%s: %s", ec->endpoints[ep], why);
}

/* ---- the worker -------------------------------------------------------------- */

static void etcdExecute(etcdClient *ec, etcdOp *op) {
    etcdConn *c = &ec->conn;
    long long backoff = ETCD_BACKOFF_MIN_MS;
    int unanswered = 0; /* a try that may have reached etcd came back without its answer */
    for (int tries = 1;; tries++) {
        long long left = etcdMsUntil(op->deadline_us);
        /* Out of time, and etcd is known to be away. A request that only
         * spent its time in the queue behind a slow etcd still gets a try. */
        if (left <= 0 && ec->lasterr) break;
        if (left <= 0) left = ETCD_ATTEMPT_TIMEOUT_MS;
        /* A hung endpoint must not eat the budget while another could
         * answer. With one endpoint there is nothing else to try, and
         * re-sending a write that timed out would only risk applying it
         * twice: let that one attempt have all the time there is. */
        long long attempt = ec->nendpoints > 1 && left > ETCD_ATTEMPT_TIMEOUT_MS ? ETCD_ATTEMPT_TIMEOUT_MS : left;
        int ep = ec->cur;
        etcdSetPost(ec, c, ep, etcdOpPath[op->type], op->body);
        curl_easy_setopt(c->easy, CURLOPT_CONNECTTIMEOUT_MS,
                         (long)(left < ETCD_CONNECT_TIMEOUT_MS ? left : ETCD_CONNECT_TIMEOUT_MS));
        curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, (long)attempt);
        int rc = etcdPerform(ec, c, NULL);
        if (rc == ETCD_STOPPED) return;
        if (c->overflow) {
            /* What answers there is not an etcd we can use: asking again
             * would only read the same flood. Refused, not retried. */
            unanswered = 1;
            sdsfree(ec->lasterr);
            ec->lasterr = sdscatprintf(sdsempty(), "%s: reply over %zu bytes, refused unread", ec->endpoints[ep],
                                       c->limit);
            break;
        }
        if (rc == CURLE_OK) {
            long status = 0;
            curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
            sdsfree(ec->lasterr);
            ec->lasterr = NULL;
            etcdParseReply(op, status, c->buf, sdslen(c->buf));
            return;
        }
        /* Only a connection never made is sure to have sent nothing. */
        if (rc != CURLE_COULDNT_CONNECT && rc != CURLE_COULDNT_RESOLVE_HOST) unanswered = 1;
        sdsfree(ec->lasterr);
        ec->lasterr = etcdTransportError(ec, c, ep, rc);
        ec->cur = (ec->cur + 1) % ec->nendpoints;
        /* Back off once every endpoint has failed in this round. */
        if (tries % ec->nendpoints == 0) {
            left = etcdMsUntil(op->deadline_us);
            if (left > 0) etcdSleep(ec, c, backoff < left ? backoff : left);
            backoff = backoff * 2 > ETCD_BACKOFF_MAX_MS ? ETCD_BACKOFF_MAX_MS : backoff * 2;
        }
    }
    etcdSetErr(op, "etcd unreachable (%s)", ec->lasterr);
    op->r.unanswered = unanswered;
}

static void *etcdWorkerMain(void *arg) {
    etcdClient *ec = arg;
    pthread_mutex_lock(&ec->lock);
    while (!atomic_load(&ec->stopping)) {
        etcdOp *op = ec->pending;
        if (op == NULL) {
            pthread_cond_wait(&ec->cond, &ec->lock);
            continue;
        }
        if ((ec->pending = op->next) == NULL) ec->pending_tail = NULL;
        pthread_mutex_unlock(&ec->lock);
        etcdExecute(ec, op);
        if (atomic_load(&ec->stopping)) etcdOpFree(op);
        else etcdComplete(ec, op);
        pthread_mutex_lock(&ec->lock);
    }
    pthread_mutex_unlock(&ec->lock);
    return NULL;
}

/* ---- the watcher --------------------------------------------------------------- */

/* The watcher's view of the stream it has open. */
typedef struct etcdStream {
    etcdClient *ec;
    long long gen;           /* the etcdWatchRestart generation it serves */
    int created, compacted;
    long long created_us;    /* when "created" came */
    int down;                /* DOWN was reported and no UP since: once per outage */
} etcdStream;

static void etcdWatchPost(etcdStream *st, int status, etcdEvent *evs, int n, long long rev) {
    etcdOp *op = zcalloc(sizeof(*op));
    op->type = OP_WATCH;
    op->wstatus = status;
    op->evs = evs;
    op->nevs = n;
    op->wrev = rev;
    op->wgen = st->gen;
    etcdComplete(st->ec, op);
}

/* Remembers where a reconnect resumes, unless a restart overrode it. */
static void etcdWatchResumeAt(etcdStream *st, long long rev, int only_if_unset) {
    etcdClient *ec = st->ec;
    pthread_mutex_lock(&ec->lock);
    if (st->gen == ec->wgen && (!only_if_unset || ec->wrev == 0)) ec->wrev = rev;
    pthread_mutex_unlock(&ec->lock);
}

static int etcdWatchEvents(etcdStream *st, json_t *arr, long long hrev) {
    size_t n = json_array_size(arr);
    const char *what;
    /* No events: a progress notification. Its revision does not move the
     * resume point: some etcd releases sent them to watchers still behind. */
    if (n == 0) return 0;
    etcdEvent *evs = zcalloc(sizeof(*evs) * n);
    for (size_t i = 0; i < n; i++) {
        json_t *ev = json_array_get(arr, i);
        evs[i].deleted = json_is_string(json_object_get(ev, "type")) &&
                         !strcmp(json_string_value(json_object_get(ev, "type")), "DELETE");
        if (etcdParseKV(json_object_get(ev, "kv"), &evs[i].kv, &what)) {
            for (size_t k = 0; k < n; k++) {
                sdsfree(evs[k].kv.key);
                sdsfree(evs[k].kv.value);
            }
            zfree(evs);
            return -1;
        }
    }
    etcdWatchResumeAt(st, evs[n - 1].kv.mod_rev + 1, 0);
    etcdWatchPost(st, ETCD_WATCH_EVENTS, evs, (int)n, hrev);
    return 0;
}

/* One line of the stream. -1 ends the stream: compacted, canceled, or
 * something we cannot read (then the watcher reconnects). */
static int etcdWatchLine(etcdStream *st, const char *line, size_t len) {
    json_error_t jerr;
    long long hrev, compact;
    int rc = -1;
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' ')) len--;
    if (len == 0) return 0;
    json_t *root = json_loadb(line, len, 0, &jerr);
    json_t *res = json_object_get(root, "result");
    if (!json_is_object(res) || etcdGetInt(json_object_get(res, "header"), "revision", &hrev) ||
        etcdGetInt(res, "compact_revision", &compact))
        goto done;
    if (compact > 0) {
        pthread_mutex_lock(&st->ec->lock);
        if (st->gen == st->ec->wgen) st->ec->wpaused = 1;
        pthread_mutex_unlock(&st->ec->lock);
        st->compacted = 1;
        etcdWatchPost(st, ETCD_WATCH_COMPACTED, NULL, 0, compact);
        goto done;
    }
    if (json_is_true(json_object_get(res, "canceled"))) goto done;
    if (json_is_true(json_object_get(res, "created")) && !st->created) {
        st->created = 1;
        st->created_us = aeMonotonicUs();
        st->down = 0;
        /* A watch "from now" starts after hrev: resume there, not "now". */
        etcdWatchResumeAt(st, hrev + 1, 1);
        etcdWatchPost(st, ETCD_WATCH_UP, NULL, 0, hrev);
    }
    rc = etcdWatchEvents(st, json_object_get(res, "events"), hrev);
done:
    if (root) json_decref(root);
    return rc;
}

/* libcurl cuts the stream anywhere: keep the tail until its newline comes. */
static size_t etcdWatchWrite(char *data, size_t size, size_t nmemb, void *priv) {
    etcdStream *st = priv;
    etcdConn *c = &st->ec->wconn;
    long status = 0;
    size_t used = 0;
    char *nl;
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) return 0; /* an error body: drop it and reconnect */
    /* The tail kept from before has no newline: look only at the new bytes,
     * or a long message would be scanned once per piece of it. */
    size_t from = sdslen(c->buf);
    c->buf = sdscatlen(c->buf, data, size * nmemb); /* libcurl hands at most 16 KiB at a time */
    while ((nl = memchr(c->buf + from, '\n', sdslen(c->buf) - from)) != NULL) {
        if (etcdWatchLine(st, c->buf + used, (size_t)(nl - (c->buf + used))) == -1) return 0;
        used = from = (size_t)(nl - c->buf) + 1;
    }
    sdsrange(c->buf, (ssize_t)used, -1);
    if (sdslen(c->buf) > c->limit) {
        c->overflow = 1; /* half a message larger than any etcd sends: reconnect */
        return 0;
    }
    return size * nmemb;
}

static sds etcdWatchBody(etcdClient *ec, long long rev) {
    json_t *req = json_pack("{s:o,s:o,s:I,s:b,s:b}", "key", etcdJsonBytes(ec->wkey, sdslen(ec->wkey)), "range_end",
                            etcdJsonBytes(ec->wend, sdslen(ec->wend)), "start_revision", (json_int_t)rev,
                            "prev_kv", 0, "progress_notify", 1);
    return etcdJsonDump(json_pack("{s:o}", "create_request", req));
}

static void *etcdWatchMain(void *arg) {
    etcdClient *ec = arg;
    etcdConn *c = &ec->wconn;
    etcdStream st = {.ec = ec};
    long long backoff = ETCD_BACKOFF_MIN_MS;
    int ep = 0;
    curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, etcdWatchWrite);
    curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, &st);
    curl_easy_setopt(c->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(c->easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c->easy, CURLOPT_LOW_SPEED_TIME, (long)ETCD_WATCH_SILENCE_S);
    for (;;) {
        pthread_mutex_lock(&ec->lock);
        while (!atomic_load(&ec->stopping) && ec->wpaused) pthread_cond_wait(&ec->cond, &ec->lock);
        st.gen = ec->wgen;
        long long rev = ec->wrev;
        pthread_mutex_unlock(&ec->lock);
        if (atomic_load(&ec->stopping)) break;

        sds body = etcdWatchBody(ec, rev);
        etcdSetPost(ec, c, ep, etcdOpPath[OP_WATCH], body);
        st.created = st.compacted = 0;
        int rc = etcdPerform(ec, c, &st.gen);
        sdsfree(body);
        if (rc == ETCD_STOPPED || st.compacted) continue; /* stop, restart, or wait for one */
        /* Back to the shortest pause only after a stream that held: one
         * that breaks as soon as it is created (a watch canceled at once,
         * a message we cannot read) would otherwise be reopened, and an
         * UP and a DOWN reported, twenty times a second for ever. */
        if (st.created && aeMonotonicUs() - st.created_us >= ETCD_BACKOFF_MAX_MS * 1000LL)
            backoff = ETCD_BACKOFF_MIN_MS;
        if (!st.down) {
            st.down = 1;
            etcdWatchPost(&st, ETCD_WATCH_DOWN, NULL, 0, 0);
        }
        ep = (ep + 1) % ec->nendpoints;
        etcdSleep(ec, c, backoff);
        backoff = backoff * 2 > ETCD_BACKOFF_MAX_MS ? ETCD_BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

/* ---- the API ------------------------------------------------------------------- */

static pthread_once_t etcd_curl_once = PTHREAD_ONCE_INIT;
static CURLcode etcd_curl_init;
static void etcdCurlInit(void) { etcd_curl_init = curl_global_init(CURL_GLOBAL_DEFAULT); }

/* Frees what etcdCreate built, after the threads (if any) have stopped. */
static void etcdFree(etcdClient *ec) {
    if (ec->pipefd[0] != -1) {
        aeDeleteFileEvent(ec->el, ec->pipefd[0], AE_READABLE);
        close(ec->pipefd[0]);
        close(ec->pipefd[1]);
    }
    etcdFreeList(ec->pending);
    etcdFreeList(ec->done);
    etcdConnFree(&ec->conn);
    etcdConnFree(&ec->wconn);
    for (int i = 0; i < ec->nendpoints; i++) sdsfree(ec->endpoints[i]);
    zfree(ec->endpoints);
    if (ec->headers) curl_slist_free_all(ec->headers);
    sdsfree(ec->lasterr);
    sdsfree(ec->wkey);
    sdsfree(ec->wend);
    pthread_mutex_destroy(&ec->lock);
    pthread_cond_destroy(&ec->cond);
    zfree(ec);
}

etcdClient *etcdCreate(aeEventLoop *el, sds *endpoints, int n, char *err, size_t errlen) {
    const char *why = "no etcd endpoints";
    etcdClient *ec = NULL;
    if (n <= 0) goto err;
    for (int i = 0; i < n; i++) {
        if (strncmp(endpoints[i], "http://", 7) && strncmp(endpoints[i], "https://", 8)) {
            why = "an etcd endpoint must start with http:// or https://";
            goto err;
        }
    }
    pthread_once(&etcd_curl_once, etcdCurlInit);
    why = "libcurl failed to initialize";
    if (etcd_curl_init != CURLE_OK) goto err;

    ec = zcalloc(sizeof(*ec));
    ec->el = el;
    ec->timeout_ms = ETCD_DEFAULT_TIMEOUT_MS;
    ec->reply_limit = ETCD_DEFAULT_REPLY_LIMIT;
    ec->pipefd[0] = ec->pipefd[1] = -1;
    pthread_mutex_init(&ec->lock, NULL);
    pthread_cond_init(&ec->cond, NULL);
    ec->endpoints = zmalloc(sizeof(sds) * (size_t)n);
    for (int i = 0; i < n; i++) {
        ec->endpoints[i] = sdsdup(endpoints[i]);
        sdstrim(ec->endpoints[i], "/"); /* paths are appended: "http://h:p/" + "/v3/.." */
        ec->nendpoints++;
    }
    /* No "Expect: 100-continue": it costs a round trip on large bodies. */
    ec->headers = curl_slist_append(NULL, "Content-Type: application/json");
    ec->headers = curl_slist_append(ec->headers, "Expect:");
    why = "cannot set up libcurl";
    if (ec->headers == NULL || etcdConnInit(ec, &ec->conn) == -1 || etcdConnInit(ec, &ec->wconn) == -1) goto err;
    if (pipe2(ec->pipefd, O_NONBLOCK | O_CLOEXEC) == -1) {
        why = strerror(errno);
        goto err;
    }
    if (aeCreateFileEvent(el, ec->pipefd[0], AE_READABLE, etcdOnPipe, ec) == AE_ERR) {
        why = "cannot register the etcd pipe in the event loop";
        goto err;
    }
    why = "cannot start the etcd worker thread";
    if (pthread_create(&ec->worker, NULL, etcdWorkerMain, ec) != 0) goto err;
    return ec;

err:
    if (err && errlen) snprintf(err, errlen, "%s", why);
    if (ec) etcdFree(ec);
    return NULL;
}

void etcdRelease(etcdClient *ec) {
    if (ec == NULL) return;
    if (ec->in_callback) { /* etcdOnPipe finishes the job once the callback returns */
        ec->release_pending = 1;
        return;
    }
    pthread_mutex_lock(&ec->lock);
    atomic_store(&ec->stopping, 1);
    pthread_cond_broadcast(&ec->cond);
    pthread_mutex_unlock(&ec->lock);
    curl_multi_wakeup(ec->conn.multi);
    curl_multi_wakeup(ec->wconn.multi);
    pthread_join(ec->worker, NULL);
    if (ec->watching) pthread_join(ec->watcher, NULL);
    etcdFree(ec);
}

void etcdSetRequestTimeout(etcdClient *ec, long long timeout_ms) { ec->timeout_ms = timeout_ms > 0 ? timeout_ms : 1; }

/* Before any request or watch: the threads read it without a lock. */
void etcdSetReplyLimit(etcdClient *ec, size_t bytes) {
    ec->reply_limit = bytes ? bytes : ETCD_DEFAULT_REPLY_LIMIT;
    ec->conn.limit = ec->wconn.limit = ec->reply_limit;
}

/* Queues a request (taking body), or completes it at once with an error
 * when it is too large for etcd: sending it would only fetch a 400. */
static void etcdSubmit(etcdClient *ec, int type, json_t *body, size_t payload, etcdCallback *cb, void *privdata) {
    etcdOp *op = zcalloc(sizeof(*op));
    op->type = type;
    op->cb = cb;
    op->privdata = privdata;
    op->deadline_us = aeMonotonicUs() + ec->timeout_ms * 1000;
    if (payload > ETCD_MAX_REQUEST) {
        etcdSetErr(op, "etcd request too large (%zu bytes of keys and values; etcd takes at most 1.5 MiB)", payload);
    } else if (body == NULL) {
        etcdSetErr(op, "cannot build the etcd request");
    } else {
        op->body = etcdJsonDump(body);
        body = NULL;
    }
    if (body) json_decref(body);
    if (op->err) {
        etcdComplete(ec, op);
        return;
    }
    pthread_mutex_lock(&ec->lock);
    etcdPush(&ec->pending, &ec->pending_tail, op);
    pthread_cond_broadcast(&ec->cond);
    pthread_mutex_unlock(&ec->lock);
}

sds etcdPrefixEnd(const char *prefix, size_t len) {
    /* The first key after every key with this prefix: drop trailing 0xff
     * bytes, then add one to the last byte. All 0xff (or empty): "\0",
     * which etcd reads as "to the end of the keyspace". */
    sds end = sdsnewlen(prefix, len);
    while (len > 0 && (unsigned char)end[len - 1] == 0xff) len--;
    if (len == 0) return sdscpylen(end, "\0", 1);
    sdssetlen(end, len);
    end[len - 1] = (char)((unsigned char)end[len - 1] + 1);
    end[len] = '\0';
    return end;
}

/* {"key": k} plus "range_end" when given. */
static json_t *etcdKeyRange(const char *key, size_t klen, const char *range_end, size_t relen) {
    json_t *j = json_pack("{s:o}", "key", etcdJsonBytes(key, klen));
    if (j && range_end && relen) json_object_set_new(j, "range_end", etcdJsonBytes(range_end, relen));
    return j;
}

static json_t *etcdPutBody(const char *key, size_t klen, const char *val, size_t vlen, long long lease) {
    json_t *j = json_pack("{s:o,s:o}", "key", etcdJsonBytes(key, klen), "value", etcdJsonBytes(val, vlen));
    if (j && lease) json_object_set_new(j, "lease", json_integer(lease));
    return j;
}

void etcdRange(etcdClient *ec, const char *key, size_t klen, const char *range_end, size_t relen, etcdCallback *cb,
               void *privdata) {
    etcdSubmit(ec, OP_RANGE, etcdKeyRange(key, klen, range_end, relen), klen + relen, cb, privdata);
}

void etcdPut(etcdClient *ec, const char *key, size_t klen, const char *val, size_t vlen, long long lease,
             etcdCallback *cb, void *privdata) {
    etcdSubmit(ec, OP_PUT, etcdPutBody(key, klen, val, vlen, lease), klen + vlen + ETCD_OP_OVERHEAD, cb, privdata);
}

void etcdDelete(etcdClient *ec, const char *key, size_t klen, const char *range_end, size_t relen, etcdCallback *cb,
                void *privdata) {
    etcdSubmit(ec, OP_DELETE, etcdKeyRange(key, klen, range_end, relen), klen + relen, cb, privdata);
}

void etcdLeaseGrant(etcdClient *ec, long long ttl_seconds, etcdCallback *cb, void *privdata) {
    etcdSubmit(ec, OP_GRANT, json_pack("{s:I}", "TTL", (json_int_t)ttl_seconds), 0, cb, privdata);
}

void etcdLeaseKeepalive(etcdClient *ec, long long lease_id, etcdCallback *cb, void *privdata) {
    etcdSubmit(ec, OP_KEEPALIVE, json_pack("{s:I}", "ID", (json_int_t)lease_id), 0, cb, privdata);
}

void etcdLeaseRevoke(etcdClient *ec, long long lease_id, etcdCallback *cb, void *privdata) {
    etcdSubmit(ec, OP_REVOKE, json_pack("{s:I}", "ID", (json_int_t)lease_id), 0, cb, privdata);
}

/* ---- transactions ------------------------------------------------------------------ */

struct etcdTxn {
    json_t *compare, *success, *failure;
    size_t payload; /* bytes of keys and values, for the size check */
};

etcdTxn *etcdTxnCreate(void) {
    etcdTxn *t = zcalloc(sizeof(*t));
    t->compare = json_array();
    t->success = json_array();
    t->failure = json_array();
    return t;
}

void etcdTxnFree(etcdTxn *t) {
    if (t == NULL) return;
    json_decref(t->compare);
    json_decref(t->success);
    json_decref(t->failure);
    zfree(t);
}

static void etcdTxnAdd(etcdTxn *t, json_t *list, json_t *item, size_t bytes) {
    json_array_append_new(list, item);
    t->payload += bytes + ETCD_OP_OVERHEAD;
}

void etcdTxnCompareModRev(etcdTxn *t, const char *key, size_t klen, long long rev) {
    /* "Does not exist" is create_revision == 0; mod_revision == 0 would do
     * as well on etcd 3.4, but CREATE says what is meant. */
    json_t *c = json_pack("{s:o,s:s,s:I,s:s}", "key", etcdJsonBytes(key, klen), "target", rev ? "MOD" : "CREATE",
                          rev ? "mod_revision" : "create_revision", (json_int_t)rev, "result", "EQUAL");
    etcdTxnAdd(t, t->compare, c, klen);
}

void etcdTxnCompareValue(etcdTxn *t, const char *key, size_t klen, const char *val, size_t vlen) {
    json_t *c = json_pack("{s:o,s:s,s:o,s:s}", "key", etcdJsonBytes(key, klen), "target", "VALUE", "value",
                          etcdJsonBytes(val, vlen), "result", "EQUAL");
    etcdTxnAdd(t, t->compare, c, klen + vlen);
}

void etcdTxnPut(etcdTxn *t, int on_success, const char *key, size_t klen, const char *val, size_t vlen,
                long long lease) {
    etcdTxnAdd(t, on_success ? t->success : t->failure,
               json_pack("{s:o}", "request_put", etcdPutBody(key, klen, val, vlen, lease)), klen + vlen);
}

void etcdTxnDelete(etcdTxn *t, int on_success, const char *key, size_t klen) {
    etcdTxnAdd(t, on_success ? t->success : t->failure,
               json_pack("{s:o}", "request_delete_range", etcdKeyRange(key, klen, NULL, 0)), klen);
}

void etcdTxnRange(etcdTxn *t, int on_success, const char *key, size_t klen, const char *range_end, size_t relen) {
    etcdTxnAdd(t, on_success ? t->success : t->failure,
               json_pack("{s:o}", "request_range", etcdKeyRange(key, klen, range_end, relen)), klen + relen);
}

void etcdTxnSubmit(etcdClient *ec, etcdTxn *t, etcdCallback *cb, void *privdata) {
    json_t *body = json_pack("{s:O,s:O,s:O}", "compare", t->compare, "success", t->success, "failure", t->failure);
    etcdSubmit(ec, OP_TXN, body, t->payload, cb, privdata);
    etcdTxnFree(t);
}

/* ---- the watch ------------------------------------------------------------------------ */

int etcdWatchPrefix(etcdClient *ec, const char *prefix, size_t plen, long long start_rev, etcdWatchCallback *cb,
                    void *privdata) {
    if (ec->watching || cb == NULL) return -1;
    ec->wkey = sdsnewlen(prefix, plen);
    ec->wend = etcdPrefixEnd(prefix, plen);
    ec->wcb = cb;
    ec->wpriv = privdata;
    ec->wrev = start_rev > 0 ? start_rev : 0;
    if (pthread_create(&ec->watcher, NULL, etcdWatchMain, ec) != 0) {
        sdsfree(ec->wkey);
        sdsfree(ec->wend);
        ec->wkey = ec->wend = NULL;
        return -1;
    }
    ec->watching = 1;
    return 0;
}

void etcdWatchRestart(etcdClient *ec, long long start_rev) {
    if (!ec->watching) return;
    pthread_mutex_lock(&ec->lock);
    ec->wrev = start_rev > 0 ? start_rev : 0;
    ec->wpaused = 0;
    atomic_fetch_add(&ec->wgen, 1);
    pthread_cond_broadcast(&ec->cond);
    pthread_mutex_unlock(&ec->lock);
    curl_multi_wakeup(ec->wconn.multi); /* cut the open stream short */
}
