/* fuzz_etcd.c -- libFuzzer target for what cluster mode reads from etcd.
 *
 * Everything etcd answers is wire input to a node: the reply of every
 * request (etcd.c: etcdParseReply, base64 and 64-bit integers as strings),
 * each line of the watch stream (etcdWatchLine), and the node records other
 * nodes wrote (cluster_node.c: clusterNodeFromJson). etcd.c is included
 * whole so its static parsers are reachable without widening its API. The
 * first input byte picks the mode:
 *
 *   0  a node record; if it parses, clusterNodeToJson of it must parse back
 *      to the same record (one meaning per record)
 *   1  the reply body of a request of type byte[1] % 7, HTTP status 200 or
 *      (byte[2] odd) 404
 *   2  watch stream lines, split on '\n', into one stream; or, when the
 *      mode byte / 3 is not 0, the same bytes as libcurl hands them to
 *      etcdWatchWrite, in pieces of that many bytes and under a 1 KiB
 *      limit: the tail kept between pieces never holds a whole line and
 *      never grows past the limit (a longer one ends the stream)
 *
 * Inputs sit in buffers of exactly their size so AddressSanitizer sees any
 * read past the end; a broken invariant is FUZZ_CHECK's __builtin_trap().
 */
/* etcdWatchWrite asks the transfer's HTTP status first: a watch answered
 * 200 here, without a transfer. */
#include <curl/curl.h>
#undef curl_easy_getinfo /* curl's type-checking macro, where it has one */
#define curl_easy_getinfo(easy, what, out) (*(out) = 200, CURLE_OK)
#include "../../src/etcd.c"
#undef curl_easy_getinfo

#include "../../src/cluster.h"

/* A broken invariant stops the run with the input saved (libFuzzer). */
#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) __builtin_trap(); \
    } while (0)

static int sameNode(const clusterNode *a, const clusterNode *b) {
    if (strcmp(a->id, b->id) || strcmp(a->group, b->group) || strcmp(a->ip, b->ip) || a->port != b->port ||
        a->cport != b->cport || a->config_epoch != b->config_epoch || strcmp(a->role, b->role) ||
        strcmp(a->primary, b->primary) || a->nranges != b->nranges || a->nmigrating != b->nmigrating ||
        a->nimporting != b->nimporting)
        return 0;
    for (int i = 0; i < a->nranges; i++)
        if (a->ranges[i][0] != b->ranges[i][0] || a->ranges[i][1] != b->ranges[i][1]) return 0;
    for (int i = 0; i < a->nmigrating; i++)
        if (a->migrating[i].slot != b->migrating[i].slot || strcmp(a->migrating[i].node, b->migrating[i].node))
            return 0;
    for (int i = 0; i < a->nimporting; i++)
        if (a->importing[i].slot != b->importing[i].slot || strcmp(a->importing[i].node, b->importing[i].node))
            return 0;
    return 1;
}

static void fuzzRecord(const uint8_t *data, size_t size) {
    char err[128];
    clusterNode *n = clusterNodeFromJson((const char *)data, size, err, sizeof(err));
    if (!n) return;
    for (int i = 0; i < n->nranges; i++)
        FUZZ_CHECK(n->ranges[i][0] >= 0 && n->ranges[i][1] < CLUSTER_SLOTS && n->ranges[i][0] <= n->ranges[i][1]);
    sds again = clusterNodeToJson(n);
    clusterNode *m = clusterNodeFromJson(again, sdslen(again), err, sizeof(err));
    FUZZ_CHECK(m != NULL && sameNode(n, m));
    clusterNodeFree(m);
    clusterNodeFree(n);
    sdsfree(again);
}

static void fuzzReply(const uint8_t *data, size_t size) {
    if (size < 2) return;
    etcdOp *op = zcalloc(sizeof(*op));
    op->type = data[0] % 7;
    long status = (data[1] & 1) ? 404 : 200;
    char *body = malloc(size - 2 + 1);
    memcpy(body, data + 2, size - 2);
    etcdParseReply(op, status, body, size - 2);
    /* Either a result or an error, never both missing for a bad body. */
    FUZZ_CHECK(op->r.nkvs >= 0 && (op->r.nkvs == 0 || op->r.kvs != NULL));
    for (int i = 0; i < op->r.nkvs; i++) FUZZ_CHECK(op->r.kvs[i].key != NULL);
    free(body);
    etcdOpFree(op);
}

static void fuzzWatch(const uint8_t *data, size_t size, size_t piece) {
    static etcdClient ec;
    static int ready;
    if (!ready) {
        pthread_mutex_init(&ec.lock, NULL);
        if (pipe(ec.pipefd) != 0) abort();
        fcntl(ec.pipefd[0], F_SETFL, O_NONBLOCK);
        fcntl(ec.pipefd[1], F_SETFL, O_NONBLOCK);
        ready = 1;
    }
    etcdStream st = {&ec, ec.wgen, 0, 0, 0};
    if (piece) {
        etcdConn *c = &ec.wconn;
        c->buf = sdsempty();
        c->limit = 1024;
        c->overflow = 0;
        for (size_t off = 0; off < size; off += piece) {
            size_t n = size - off < piece ? size - off : piece;
            char *bytes = malloc(n);
            memcpy(bytes, data + off, n);
            size_t took = etcdWatchWrite(bytes, 1, n, &st);
            free(bytes);
            if (took != n) {
                FUZZ_CHECK(took == 0);
                break;
            }
            FUZZ_CHECK(sdslen(c->buf) <= c->limit && memchr(c->buf, '\n', sdslen(c->buf)) == NULL);
        }
        sdsfree(c->buf);
        c->buf = NULL;
    } else {
        char *buf = malloc(size ? size : 1);
        memcpy(buf, data, size);
        size_t start = 0;
        for (size_t i = 0; i <= size; i++) {
            if (i < size && buf[i] != '\n') continue;
            if (etcdWatchLine(&st, buf + start, i - start) == -1) break;
            start = i + 1;
        }
        free(buf);
    }
    char drain[64];
    while (read(ec.pipefd[0], drain, sizeof(drain)) > 0) {
    }
    etcdFreeList(ec.done);
    ec.done = ec.done_tail = NULL;
    ec.wpaused = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: {
        uint8_t *copy = malloc(size - 1 ? size - 1 : 1);
        memcpy(copy, data + 1, size - 1);
        fuzzRecord(copy, size - 1);
        free(copy);
        break;
    }
    case 1: fuzzReply(data + 1, size - 1); break;
    default: fuzzWatch(data + 1, size - 1, data[0] / 3); break;
    }
    return 0;
}
