/* fuzz_repl.c -- libFuzzer target for the wire readers of the replication
 * link and of the pipeline prefetch scan, which need the whole server
 * around them.
 *
 * What a replica reads from its primary (replication_replica.c) is parsed
 * by hand before the log's reader takes over: the handshake lines (+OK,
 * +FULLRESYNC <replid> <offset>, +CONTINUE [<replid>], -errors), the
 * "$EOF <keys>" or "$<len>" header of a snapshot, the records (checked by
 * aofNextRecord, fuzz_aof's), the "+SNAPSHOT-END <offset>" marker, and the
 * prefetch scan over the records as they arrive. What a primary reads from
 * a replica is RESP (fuzz_resp's parser) run as commands: AUTH, REPLCONF
 * node-id / listening-port / ack / failover and PSYNC, whose replid and
 * offset it checks by hand and which starts a full sync in slices or
 * continues from the backlog. And the pipeline prefetch scan (prefetch.c)
 * reads every authenticated client's pipelined input before the parser
 * does, with its own number parsing, and follows what it finds through
 * the keyspace.
 *
 * The server is set up once, as main would (the command table, the users,
 * the defaults through main's --version, then a 4 MiB pool, an event loop
 * and a cluster of two nodes made by hand: no etcd), with a few keys, one
 * of them with a TTL. The ACL file gives the default user only the
 * commands a replica sends, and those that change how a connection's
 * replies go (HELLO, MULTI, RESET, SUBSCRIBE, MONITOR, QUIT; PING,
 * SELECT, ECHO), so the primary mode exercises the handshake and what a
 * replica connection may mix into it, not every command there is. The
 * first input byte picks the mode:
 *
 *   0  the replica's link: this node is a replica; byte 1's bits pick
 *      whether it has a history to continue (and so may take +CONTINUE),
 *      whether it sent AUTH, whether prefetch is on; byte 2 the size of
 *      the pieces the rest arrives in, through a socketpair, read by the
 *      link's own read handler (its acknowledgements drained); values of 16
 *      bytes or more are read in place (repl_inplace_min), and after each
 *      input none may be left half-read or holding pool space
 *   1  the primary's side: this node is a primary with a backlog of the
 *      length byte 1 picks (its replid fixed, so a seed can continue it);
 *      byte 2 the piece size; the rest is what a replica connection sends,
 *      through a socketpair and the client's read handler, with the event
 *      loop's time events (the snapshot's slices) and the stream's
 *      beforeSleep run after each piece
 *   2  the prefetch scan: the rest is a query buffer; byte 1 where the
 *      client's parse position is. prefetchPipeline runs on it, and the
 *      scan's requests are compared with what the RESP parser makes of
 *      the same bytes
 *
 * Checked: ASan/UBSan, and that the scan never counts a request the
 * parser reads differently (a name or a key other than the parser's: the
 * prefetched key would not be the command's, or the count that skips the
 * next scans would be wrong). A broken invariant is __builtin_trap().
 */
#include "../../src/replication_replica.c"

#include "../../src/prefetch.c"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "acl.h"
#include "resp.h"
#include "zmalloc.h"

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) __builtin_trap(); \
    } while (0)

int mooncakeServerMain(int argc, char **argv);

static int ready;
/* The two nodes: this one and the other, each the other's primary in turn. */
#define ME_ID "1111111111111111111111111111111111111111"
#define PEER_ID "2222222222222222222222222222222222222222"
/* The replid a primary-mode backlog holds, and a replica-mode history. */
#define FUZZ_REPLID "abcdefabcdefabcdefabcdefabcdefabcdefabcd"
static clusterNode *me, *peer;

static uint64_t nodeHash(const void *key) { return dictGenHashFunction(key, strlen(key)); }
static int nodeCompare(const void *a, const void *b) { return strcmp(a, b) == 0; }
static dictType nodesType = {nodeHash, nodeCompare, NULL, NULL};

static void allSlots(clusterNode *n) {
    zfree(n->ranges);
    n->ranges = zmalloc(sizeof(*n->ranges));
    n->ranges[0][0] = 0;
    n->ranges[0][1] = CLUSTER_SLOTS - 1;
    n->nranges = 1;
}

static void noSlots(clusterNode *n) {
    zfree(n->ranges);
    n->ranges = NULL;
    n->nranges = 0;
}

/* Roles as etcd would state them, applied by the cluster's own rebuild
 * (replClusterChanged does the demotion or promotion). */
static void setRoles(clusterNode *primary, const char *primary_id, clusterNode *replica) {
    snprintf(replica->role, sizeof(replica->role), "replica");
    snprintf(replica->primary, sizeof(replica->primary), "%s", primary_id);
    noSlots(replica);
    snprintf(primary->role, sizeof(primary->role), "primary");
    primary->primary[0] = '\0';
    allSlots(primary);
    clusterRebuild();
}

static void becomeReplica(void) {
    if (clusterNodeIsReplica(me)) return;
    setRoles(peer, PEER_ID, me);
    replBeforeSleep(); /* the demotion's flush */
}

static void becomePrimary(void) {
    if (!clusterNodeIsReplica(me)) return;
    setRoles(me, ME_ID, peer);
}

static void putKey(const char *k, const char *v, long long ttl_ms) {
    sds key = sdsnew(k);
    if (!storeKeyPresent(key)) {
        storeObj *o = storeObjCreateFrom(v, strlen(v));
        FUZZ_CHECK(o != NULL);
        storeSet(key, o, ttl_ms ? mstime() + ttl_ms : -1, 0);
    }
    sdsfree(key);
}

/* The keys the prefetch scan and a full sync find (a replica's input may
 * have flushed them). */
static void putKeys(void) {
    putKey("a", "1", 0);
    putKey("b", "hello", 0);
    putKey("key:1", "value one", 0);
    putKey("key:2", "22", 0);
    putKey("counter", "41", 0);
    putKey("ttl", "soon", 3600 * 1000);
}

static void setUp(void) {
    char *vargv[] = {"mooncake-server", "--version", NULL};
    mooncakeServerMain(2, vargv);
    repl_inplace_min = 16; /* large values' in-place reads, with small inputs */
    /* The default user may run what a replica sends, nothing else; "repl"
     * is a masteruser. */
    /* A memfd named through /proc: a file no one else sees and nothing to clean up. */
    int fd = memfd_create("fuzz_repl_acl", 0);
    FUZZ_CHECK(fd != -1);
    char aclpath[64];
    snprintf(aclpath, sizeof(aclpath), "/proc/self/fd/%d", fd);
    const char *acl = "user default on nopass ~* +psync +replconf +ping +auth +hello +select +echo +multi +exec "
                      "+discard +reset +quit +subscribe +unsubscribe +monitor\n"
                      "user repl on >secret ~* +psync +replconf +ping\n";
    FUZZ_CHECK(write(fd, acl, strlen(acl)) == (ssize_t)strlen(acl));
    char *cargv[] = {"--segment-size", "4mb", "--segment-prefault", "no", "--cluster-enabled", "yes",
                     "--repl-backlog-size", "16kb", "--loglevel", "warning", "--logfile", "/dev/null",
                     "--aclfile", aclpath};
    char err[512];
    if (loadServerConfig(NULL, (int)(sizeof(cargv) / sizeof(cargv[0])), cargv, err, sizeof(err)) != C_OK ||
        aclLoadConfiguredFile(err, sizeof(err)) != C_OK) {
        fprintf(stderr, "fuzz_repl set-up: %s\n", err);
        __builtin_trap();
    }
    close(fd);
    server.el = aeCreateEventLoop(1024);
    FUZZ_CHECK(server.el != NULL);
    multiInit();
    if (storeInit(err, sizeof(err)) != C_OK) {
        fprintf(stderr, "fuzz_repl set-up: %s\n", err);
        __builtin_trap();
    }
    slowlogInit();
    /* clusterInit without etcd: two nodes, this one the primary. */
    clusterState *cs = zcalloc(sizeof(*cs));
    server.cluster = cs;
    cs->nodes = dictCreate(&nodesType);
    me = clusterNodeCreate(ME_ID);
    peer = clusterNodeCreate(PEER_ID);
    snprintf(me->group, sizeof(me->group), "g");
    snprintf(peer->group, sizeof(peer->group), "g");
    snprintf(me->ip, sizeof(me->ip), "127.0.0.1");
    snprintf(peer->ip, sizeof(peer->ip), "127.0.0.1");
    me->port = 7001;
    peer->port = 7002;
    me->flags = CNODE_MYSELF;
    me->alive = peer->alive = 1;
    cs->myself = me;
    dictAdd(cs->nodes, me->id, me);
    dictAdd(cs->nodes, peer->id, peer);
    snprintf(peer->role, sizeof(peer->role), "replica");
    snprintf(peer->primary, sizeof(peer->primary), "%s", ME_ID);
    allSlots(me);
    clusterRebuild();
    server.mstime = mstime();
    ready = 1;
}

/* Writes up to n bytes of data to fd (a socketpair end with room for a
 * piece); returns how many went. */
static size_t feed(int fd, const uint8_t *data, size_t n) {
    ssize_t w = write(fd, data, n);
    return w > 0 ? (size_t)w : 0;
}

static void drain(int fd) {
    char buf[4096];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
}

static size_t pieceSize(uint8_t b) { return b == 0 ? 65536 : (size_t)b * 4; }

/* Mode 0: what a replica reads from its primary. */
static void fuzzReplicaLink(const uint8_t *data, size_t size) {
    if (size < 2) return;
    uint8_t flags = data[0];
    size_t piece = pieceSize(data[1]);
    data += 2, size -= 2;
    becomeReplica();
    storeFlush(); /* what the last input applied */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == -1) return;
    repl.fd = sv[0];
    repl.state = LINK_HANDSHAKE;
    repl.state_since_ms = mstime();
    repl.auth_sent = (flags & 1) != 0;
    repl.history = (flags & 2) != 0;
    if (repl.history) {
        snprintf(repl.replid, sizeof(repl.replid), "%s", FUZZ_REPLID);
        repl.applied = (flags & 8) ? 1000 : 0;
    }
    repl.prefetch_left = 0;
    server.prefetch_batch = (flags & 4) ? 16 : 0;
    while (size && repl.fd != -1) {
        size_t n = feed(sv[1], data, size < piece ? size : piece);
        if (n == 0) break;
        data += n, size -= n;
        linkReadHandler(server.el, sv[0], NULL, AE_READABLE);
        FUZZ_CHECK(repl.fd == -1 || repl.rpos <= sdslen(repl.rbuf));
        FUZZ_CHECK(!repl.inplace_obj || (repl.fd != -1 && repl.inplace_got <= repl.inplace_obj->len));
        drain(sv[1]);
    }
    if (repl.fd != -1) replLinkClose(NULL);
    /* A value cut short or refused was given back with the link. */
    FUZZ_CHECK(repl.inplace_obj == NULL && repl.inplace_head == NULL);
    storeFlush();
    storeStats st;
    storeGetStats(&st);
    FUZZ_CHECK(st.pool_values == 0 && st.pool_pending == 0);
    close(sv[1]);
    server.prefetch_batch = 16;
}

/* Mode 1: what a primary reads from a replica connection. */
static void fuzzPrimarySide(const uint8_t *data, size_t size) {
    if (size < 2) return;
    uint8_t flags = data[0];
    size_t piece = pieceSize(data[1]);
    data += 2, size -= 2;
    becomePrimary();
    putKeys();
    replBeforeSleep(); /* their records, if new, before the history is set */
    /* The history a PSYNC may continue: FUZZ_REPLID, with a backlog of up
     * to 16 KiB (or none), and a previous replid valid up to offset 100. */
    snprintf(repl.replid, sizeof(repl.replid), "%s", FUZZ_REPLID);
    replBacklogFree();
    repl.offset = 0;
    if (flags & 1) {
        replBacklogReset();
        char fill[256];
        memset(fill, 'x', sizeof(fill));
        for (int i = 0; i < (flags >> 1); i++) replBacklogFeed(fill, sizeof(fill));
        repl.offset = (long long)(flags >> 1) * (long long)sizeof(fill);
    }
    if (flags & 0x80) {
        memset(repl.replid2, '9', CLUSTER_NAMELEN);
        repl.replid2[CLUSTER_NAMELEN] = '\0';
        repl.second_offset = 100;
    } else {
        repl.replid2[0] = '\0';
        repl.second_offset = -1;
    }
    /* What an earlier input's REPLCONF FAILOVER or DEBUG-HOLD-STREAM set. */
    repl.pause_until = repl.debug_hold_until = 0;
    repl.handover_to[0] = repl.debug_hold_id[0] = '\0';
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == -1) return;
    client *c = createClient(sv[0], 1);
    if (c == NULL) {
        close(sv[0]);
        close(sv[1]);
        return;
    }
    uint64_t id = c->id;
    int gone = 0;
    while (size && !gone) {
        size_t n = feed(sv[1], data, size < piece ? size : piece);
        if (n == 0) break;
        data += n, size -= n;
        readQueryFromClient(server.el, sv[0], c, AE_READABLE);
        /* The loop's other work for this iteration: the snapshot's slices
         * (a time event), the stream, closing what asked to be closed. */
        for (int i = 0; i < 4 && repl.snapshot_step_id != -1; i++) aeProcessEvents(server.el, AE_TIME_EVENTS | AE_DONT_WAIT);
        replBeforeSleep();
        gone = (c->flags & CLIENT_CLOSE_ASAP) != 0;
        freeClientsInAsyncFreeQueue();
    }
    /* Gone by itself or closed now; either way no link may outlive it. */
    if (!gone) freeClient(c);
    for (int i = 0; i < repl.nlinks; i++) FUZZ_CHECK(repl.links[i]->id != id);
    while (repl.snapshot_step_id != -1) aeProcessEvents(server.el, AE_TIME_EVENTS | AE_DONT_WAIT);
    close(sv[1]);
}

/* Mode 2: the prefetch scan over a query buffer, against the parser. */
static void fuzzPrefetch(const uint8_t *data, size_t size) {
    if (size < 1) return;
    size_t at = data[0];
    data++, size--;
    if (at > size) at = size;
    becomePrimary();
    putKeys();
    replBeforeSleep();
    /* As processInputBuffer calls it: a client's buffer, from qb_pos. */
    client c;
    memset(&c, 0, sizeof(c));
    c.authenticated = 1;
    c.querybuf = sdsnewlen(data, size);
    c.qb_pos = at;
    int n = prefetchPipeline(&c);
    const char *buf = c.querybuf + at;
    size_t len = size - at;
    pfReq reqs[PREFETCH_BATCH];
    int m = scanRequests(buf, len, reqs, PREFETCH_BATCH);
    FUZZ_CHECK(n == m);
    /* Each request the scan counted, as the parser reads it (a connection
     * authenticated, proto-max-bulk-len's default). Where the parser
     * refuses the bytes the connection ends, and the count with it. */
    respReqParser p;
    respReqInit(&p, server.proto_max_bulk_len, PROTO_BIG_ARG);
    size_t pos = 0;
    for (int i = 0; i < m; i++) {
        respTok tok;
        size_t used;
        int t = respReqNext(&p, buf + pos, len - pos, &used, &tok);
        pos += used;
        if (t == RESP_ERR) break;
        FUZZ_CHECK(t == RESP_ARRAY && tok.n == reqs[i].argc);
        int j;
        for (j = 0; j < reqs[i].argc; j++) {
            t = respReqNext(&p, buf + pos, len - pos, &used, &tok);
            pos += used;
            if (t == RESP_ERR) break;
            FUZZ_CHECK(t == RESP_ARG);
            if (j == 0) FUZZ_CHECK(tok.ptr == reqs[i].name && tok.len == reqs[i].namelen);
            else if (j <= PREFETCH_ARGS_KEPT) FUZZ_CHECK(tok.ptr == reqs[i].arg[j] && tok.len == reqs[i].arglen[j]);
        }
        if (j < reqs[i].argc) break;
    }
    sdsfree(c.querybuf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ready) setUp();
    if (size == 0) return 0;
    server.mstime = mstime();
    switch (data[0] % 3) {
    case 0: fuzzReplicaLink(data + 1, size - 1); break;
    case 1: fuzzPrimarySide(data + 1, size - 1); break;
    case 2: fuzzPrefetch(data + 1, size - 1); break;
    }
    return 0;
}
