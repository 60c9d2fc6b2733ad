/* networking.c -- clients: accepting, reading requests, queueing replies.
 *
 * Input. Bytes are read into the client's query buffer and fed to the RESP
 * parser (resp.c) one token at a time. Arguments shorter than PROTO_BIG_ARG
 * are copied out of the query buffer; for a longer one the parser stops
 * after its header and we ask the command (its `bigarg` hook) where the
 * payload should go. SET answers "here, in the pool": the extent is
 * allocated before the payload arrives and the socket is read straight into
 * it with readv (payload, its CRLF, and the start of the next request in
 * one call). A value therefore crosses memory once, in the kernel. If the
 * pool has no room the payload is read and discarded, and the command
 * replies -OOM having changed nothing.
 *
 * Output. Replies go to a 16 KiB buffer inside the client, then to a chain
 * of blocks. A value of PROTO_REPLY_OBJ_MIN bytes or more is not copied at
 * all: its block points into segment memory and holds a reference on the
 * object, so the bytes leave with writev straight from the pool and the
 * object outlives any DEL or overwrite until they have. Writes are batched:
 * commands only mark the client, and beforeSleep flushes every marked
 * client once per event-loop iteration (a pipeline of 10k commands costs a
 * handful of writes, not 10k).
 *
 * Lifetime. A client is never freed while a command runs or while the loop
 * may still hold a pointer to it: kills, protocol errors and output limits
 * mark it and it is freed in beforeSleep (freeClientAsync).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "acl.h"
#include "anet.h"
#include "cluster.h"
#include "monitor.h"
#include "prefetch.h"
#include "multi.h"
#include "owner.h"
#include "pubsub.h"
#include "relay.h"
#include "replication.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

#define MAX_ACCEPTS_PER_CALL 1000
#define NET_MAX_WRITES_PER_EVENT (256ULL * 1024 * 1024)
#define IOV_BATCH 64
#define REPLY_FILL_AHEAD (4u << 20) /* bytes gathered for a writev past which no block is filled */

static void writeHandler(aeEventLoop *el, int fd, void *privdata, int mask);

/* ---- creation and destruction -------------------------------------------- */

/* tcp-congestion (config.c): "system" leaves the socket alone, "auto" gives
 * same-host clients the window-only algorithm anet picks, a name applies to
 * every TCP client. A refusal is not fatal: the default still works. */
static void setClientCongestion(int fd, const char *peer_ip, const char *local_ip) {
    const char *want = server.tcp_congestion;
    if (!strcmp(want, "system")) return;
    if (!strcmp(want, "auto")) {
        want = anetLocalCongestion();
        if (want == NULL || !anetPeerIsLocal(peer_ip, local_ip)) return;
    }
    anetSetCongestion(NULL, fd, want);
}

client *createClient(int fd, int unix) {
    client *c = zcalloc(sizeof(*c));
    c->fd = fd;
    c->id = ++server.next_client_id;
    c->resp = 2;
    c->user = DefaultUser;
    aclClientCountAs(c, DefaultUser);
    c->authenticated = aclUserOpensWithoutAuth(DefaultUser);
    c->querybuf = sdsempty();
    c->pass_fd = -1;
    c->ctime = c->lastinteraction = monoMs();
    respReqInit(&c->parser, server.proto_max_bulk_len, PROTO_BIG_ARG);
    c->parser.unauthenticated = !c->authenticated;
    if (unix) {
        c->flags |= CLIENT_UNIX_SOCKET;
        snprintf(c->addr, sizeof(c->addr), "%s:0", server.unixsocket ? server.unixsocket : "");
        snprintf(c->laddr, sizeof(c->laddr), "%s:0", server.unixsocket ? server.unixsocket : "");
    } else {
        char ip[NET_IP_STR_LEN], lip[NET_IP_STR_LEN];
        int port;
        anetFdToString(fd, ip, sizeof(ip), &port, 1);
        anetFormatAddr(c->addr, sizeof(c->addr), ip, port);
        anetFdToString(fd, lip, sizeof(lip), &port, 0);
        anetFormatAddr(c->laddr, sizeof(c->laddr), lip, port);
        anetEnableTcpNoDelay(NULL, fd);
        setClientCongestion(fd, ip, lip);
        if (server.tcpkeepalive) anetKeepAlive(NULL, fd, (int)server.tcpkeepalive);
        if (server.tcp_notsent_lowat) anetSetNotSentLowat(NULL, fd, (int)server.tcp_notsent_lowat);
    }
    if (aeCreateFileEvent(server.el, fd, AE_READABLE, readQueryFromClient, c) == AE_ERR) {
        sdsfree(c->querybuf);
        zfree(c);
        return NULL;
    }
    c->next = server.clients_head;
    if (c->next) c->next->prev = c;
    else server.clients_tail = c;
    server.clients_head = c;
    server.nclients++;
    clientIndexAdd(c);
    return c;
}

static void freeReplyBlock(replyBlock *b) {
    if (b->obj) storeObjDecrRef(b->obj);
    zfree(b);
}

void freeClientArgv(client *c) {
    for (int j = 0; j < c->argc; j++) {
        sdsfree(c->argv[j]);
        if (c->argobj && c->argobj[j]) {
            storeObjDecrRef(c->argobj[j]);
            c->argobj[j] = NULL;
        }
    }
    c->argc = 0;
    c->argv_bytes = 0;
    c->cmd = NULL;
}

static void removeFromArray(client **arr, size_t *len, client *c) {
    for (size_t i = 0; i < *len; i++) {
        if (arr[i] == c) {
            arr[i] = arr[--*len];
            return;
        }
    }
}

/* A big argument being read into the heap owns its buffer; one being read
 * into the pool holds an object reference through argobj. Either way the
 * partial bytes are dropped here: a client that disconnects mid-value
 * leaves no trace in the keyspace. */
static void abortBigArg(client *c) {
    if (c->big.len == 0) return;
    if (c->argobj && c->argobj[c->big.argi]) {
        storeObjDecrRef(c->argobj[c->big.argi]);
        c->argobj[c->big.argi] = NULL;
    }
    if (c->argv && c->argv[c->big.argi]) {
        sdsfree(c->argv[c->big.argi]);
        c->argv[c->big.argi] = NULL;
    }
    memset(&c->big, 0, sizeof(c->big));
}

void freeClient(client *c) {
    if (c->flags & CLIENT_PROTECTED) {
        freeClientAsync(c);
        return;
    }
    if (server.current_client == c) server.current_client = NULL;
    if (c->fd != -1) {
        aeDeleteFileEvent(server.el, c->fd, AE_READABLE | AE_WRITABLE);
        close(c->fd);
        c->fd = -1;
    }
    abortBigArg(c);
    monitorRemove(c);
    aclClientCountAs(c, NULL);
    discardTransaction(c); /* the queued arguments, and the WATCHes */
    zfree(c->watched);
    ownerDetachClient(c);
    if (c->flags & CLIENT_PAUSED) pauseClientGone(c);
    if (c->flags & CLIENT_BLOCKED) {
        server.blocked_clients--;
        clusterOpClientGone(c);
    }
    replClientGone(c);
    relayClientReset(c); /* its reads, cancelled */
    if (c->leases) clientLeasesPrune(c, 1);
    if (c->holds) clientHoldsFree(c);
    /* Its pending puts can never be ended now: the sweep gives them back. */
    storePutOwnerGone(c->put_owner);
    c->put_owner = NULL;
    pubsubUnsubscribeAll(c, 0);
    freeClientArgv(c);
    if (c->pass_fd >= 0) close(c->pass_fd);
    zfree(c->argv);
    zfree(c->argobj);
    zfree(c->buf);
    zfree(c->arglen);
    sdsfree(c->querybuf);
    sdsfree(c->name);
    while (c->reply_head) {
        replyBlock *b = c->reply_head;
        c->reply_head = b->next;
        freeReplyBlock(b);
    }
    if (c->flags & CLIENT_PENDING_WRITE)
        removeFromArray(server.pending_writes, &server.pending_writes_len, c);
    if (c->flags & CLIENT_CLOSE_ASAP)
        removeFromArray(server.clients_to_close, &server.clients_to_close_len, c);
    if (c->prev) c->prev->next = c->next;
    else server.clients_head = c->next;
    if (c->next) c->next->prev = c->prev;
    else server.clients_tail = c->prev;
    server.nclients--;
    clientIndexRemove(c);
    zfree(c);
}

static void arrayPush(client ***arr, size_t *len, size_t *cap, client *c) {
    if (*len == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *arr = zrealloc(*arr, sizeof(client *) * *cap);
    }
    (*arr)[(*len)++] = c;
}

void freeClientAsync(client *c) {
    if (c->flags & CLIENT_CLOSE_ASAP) return;
    c->flags |= CLIENT_CLOSE_ASAP;
    arrayPush(&server.clients_to_close, &server.clients_to_close_len,
              &server.clients_to_close_cap, c);
}

void freeClientsInAsyncFreeQueue(void) {
    while (server.clients_to_close_len) {
        client *c = server.clients_to_close[server.clients_to_close_len - 1];
        if (c->flags & CLIENT_PROTECTED) break; /* never happens outside call() */
        c->flags &= ~CLIENT_CLOSE_ASAP;
        server.clients_to_close_len--;
        freeClient(c);
    }
}

/* ---- accepting ----------------------------------------------------------- */

static void acceptCommonHandler(int fd, int unix, const char *ip) {
    /* Refusals are written before the close so redis-cli shows the reason;
     * the socket is fresh and the text small, so the write cannot block. */
    if (server.nclients >= (unsigned long)server.maxclients) {
        const char *err = "-ERR max number of clients reached\r\n";
        if (write(fd, err, strlen(err)) == -1) { /* best effort */ }
        server.stat_rejected_conn++;
        /* Verbose, as each accept is: the peer's next write meets a closed
         * socket ("Broken pipe"), and this line is the server's account. */
        serverLog(LL_VERBOSE, "Refused a connection from %s: max number of clients reached (maxclients %lld)",
                  unix ? "the unix socket" : ip, (long long)server.maxclients);
        close(fd);
        return;
    }
    if (!unix && server.protected_mode &&
        !aclDefaultUserHasPassword() && !anetIsLoopback(ip)) {
        const char *err =
            "-DENIED Mooncake is running in protected mode because protected mode is enabled and "
            "no password is set for the default user. In this mode connections are only accepted "
            "from the loopback interface. If you want to connect from external computers, either "
            "set a password with 'requirepass', or disable protected mode with "
            "'protected-mode no' (CONFIG SET protected-mode no from the loopback interface).\r\n";
        if (write(fd, err, strlen(err)) == -1) { /* best effort */ }
        server.stat_rejected_conn++;
        close(fd);
        return;
    }
    client *c = createClient(fd, unix);
    if (c == NULL) {
        serverLog(LL_WARNING, "Error registering fd event for the new client: %s (fd=%d)",
                  strerror(errno), fd);
        close(fd);
        return;
    }
    server.stat_numconnections++;
}

void acceptTcpHandler(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el, (void)privdata, (void)mask;
    char ip[NET_IP_STR_LEN], err[ANET_ERR_LEN];
    int port;
    for (int max = MAX_ACCEPTS_PER_CALL; max--;) {
        int cfd = anetTcpAccept(err, fd, ip, sizeof(ip), &port);
        if (cfd == ANET_ERR) {
            if (errno != EWOULDBLOCK && errno != EAGAIN)
                serverLog(LL_WARNING, "Accepting client connection: %s", err);
            return;
        }
        serverLog(LL_VERBOSE, "Accepted %s:%d", ip, port);
        acceptCommonHandler(cfd, 0, ip);
    }
}

void acceptUnixHandler(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el, (void)privdata, (void)mask;
    char err[ANET_ERR_LEN];
    for (int max = MAX_ACCEPTS_PER_CALL; max--;) {
        int cfd = anetUnixAccept(err, fd);
        if (cfd == ANET_ERR) {
            if (errno != EWOULDBLOCK && errno != EAGAIN)
                serverLog(LL_WARNING, "Accepting client connection: %s", err);
            return;
        }
        serverLog(LL_VERBOSE, "Accepted connection to %s", server.unixsocket);
        acceptCommonHandler(cfd, 1, "/unixsocket");
    }
}

/* ---- replies ------------------------------------------------------------- */

/* CLIENT REPLY OFF and SKIP drop replies here, the one place every reply
 * passes, MONITOR lines included (as in Redis). */
static int prepareClientToWrite(client *c) {
    if (c->fd == -1 || (c->flags & (CLIENT_CLOSE_ASAP | CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP))) return C_ERR;
    if (!(c->flags & CLIENT_PENDING_WRITE)) {
        c->flags |= CLIENT_PENDING_WRITE;
        arrayPush(&server.pending_writes, &server.pending_writes_len,
                  &server.pending_writes_cap, c);
    }
    return C_OK;
}

static void appendBlock(client *c, replyBlock *b) {
    b->next = NULL;
    if (c->reply_tail) c->reply_tail->next = b;
    else c->reply_head = b;
    c->reply_tail = b;
}

static void addReplyToChain(client *c, const char *s, size_t len) {
    replyBlock *tail = c->reply_tail;
    if (tail && !tail->obj && tail->size > tail->used) {
        size_t n = tail->size - tail->used < len ? tail->size - tail->used : len;
        memcpy(tail->buf + tail->used, s, n);
        tail->used += n;
        s += n;
        len -= n;
        c->reply_bytes += n;
    }
    if (len) {
        size_t size = len < PROTO_REPLY_CHUNK ? PROTO_REPLY_CHUNK : len;
        replyBlock *b = zmalloc(sizeof(*b) + size);
        b->obj = NULL;
        b->fill = NULL;
        b->ptr = b->buf;
        b->size = size;
        b->used = len;
        memcpy(b->buf, s, len);
        appendBlock(c, b);
        c->reply_bytes += len;
    }
    checkClientOutputBufferLimits(c);
}

/* Raw protocol bytes. Everything below ends up here. */
void addReplyProto(client *c, const char *s, size_t len) {
    if (prepareClientToWrite(c) != C_OK) return;
    if (c->reply_head == NULL) {
        if (c->buf == NULL) c->buf = zmalloc(PROTO_REPLY_CHUNK);
        if (len <= PROTO_REPLY_CHUNK - c->bufpos) {
            memcpy(c->buf + c->bufpos, s, len);
            c->bufpos += len;
            if (c->bufpos > c->buf_peak) c->buf_peak = c->bufpos;
            return;
        }
    }
    addReplyToChain(c, s, len);
}

void addReply(client *c, const char *s, size_t len) { addReplyProto(c, s, len); }

static void addReplyLongLongWithPrefix(client *c, long long ll, char prefix) {
    char buf[32];
    buf[0] = prefix;
    int n = ll2string(buf + 1, sizeof(buf) - 3, ll);
    buf[n + 1] = '\r';
    buf[n + 2] = '\n';
    addReplyProto(c, buf, (size_t)n + 3);
}

void addReplyStr(client *c, const char *s) { addReplyProto(c, s, strlen(s)); }

void addReplyStatus(client *c, const char *status) {
    addReplyProto(c, "+", 1);
    addReplyProto(c, status, strlen(status));
    addReplyProto(c, "\r\n", 2);
}

void addReplyOk(client *c) { addReplyProto(c, "+OK\r\n", 5); }

/* Errors are counted (INFO errorstats-lite) and, since an error string must
 * be one line, any newline in a message built from user input is replaced
 * so a client can never inject a second reply. */
void addReplyError(client *c, const char *err) {
    size_t len = strlen(err);
    char buf[512];
    if (len > sizeof(buf) - 4) len = sizeof(buf) - 4;
    size_t n = 0;
    if (err[0] != '-') buf[n++] = '-';
    for (size_t i = 0; i < len; i++) buf[n++] = (err[i] == '\r' || err[i] == '\n') ? ' ' : err[i];
    buf[n++] = '\r';
    buf[n++] = '\n';
    addReplyProto(c, buf, n);
    server.stat_total_error_replies++;
    statsRecordError(buf, n - 2);
    if (c->cmd) c->cmd->failed_calls++;
}

void addReplyErrorFormat(client *c, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    addReplyError(c, buf);
}

void addReplyErrorArity(client *c) {
    addReplyErrorFormat(c, "ERR wrong number of arguments for '%s' command",
                        c->cmd ? c->cmd->fullname : c->argv[0]);
}

void addReplyErrorSyntax(client *c) { addReplyError(c, "ERR syntax error"); }

void addReplySubcommandSyntaxError(client *c) {
    sds cmd = sdsnew(c->argv[0]);
    sdstoupper(cmd);
    char sub[128];
    snprintf(sub, sizeof(sub), "%.100s", c->argv[1]);
    addReplyErrorFormat(c, "ERR unknown subcommand or wrong number of arguments for '%s'. Try %s HELP.", sub, cmd);
    sdsfree(cmd);
}

void addReplyLongLong(client *c, long long ll) {
    if (ll == 0) addReplyProto(c, ":0\r\n", 4);
    else if (ll == 1) addReplyProto(c, ":1\r\n", 4);
    else addReplyLongLongWithPrefix(c, ll, ':');
}

void addReplyArrayLen(client *c, long long len) { addReplyLongLongWithPrefix(c, len, '*'); }
/* Pub/Sub messages: out of band under RESP3, so a client can tell them
 * from replies; under RESP2 they are arrays (and the subscribed context
 * allows only commands whose replies look alike, pubsub.c). */
void addReplyPushLen(client *c, long long len) { addReplyLongLongWithPrefix(c, len, c->resp == 2 ? '*' : '>'); }
void addReplyMapLen(client *c, long long len) {
    if (c->resp == 2) addReplyLongLongWithPrefix(c, len * 2, '*');
    else addReplyLongLongWithPrefix(c, len, '%');
}
void addReplySetLen(client *c, long long len) {
    addReplyLongLongWithPrefix(c, len, c->resp == 2 ? '*' : '~');
}

void addReplyNull(client *c) {
    if (c->resp == 2) addReplyProto(c, "$-1\r\n", 5);
    else addReplyProto(c, "_\r\n", 3);
}

void addReplyNullArray(client *c) {
    if (c->resp == 2) addReplyProto(c, "*-1\r\n", 5);
    else addReplyProto(c, "_\r\n", 3);
}

void addReplyBool(client *c, int b) {
    if (c->resp == 2) addReplyProto(c, b ? ":1\r\n" : ":0\r\n", 4);
    else addReplyProto(c, b ? "#t\r\n" : "#f\r\n", 4);
}

void addReplyDouble(client *c, double d) {
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%.17g", d);
    if (c->resp == 2) {
        addReplyBulk(c, buf, (size_t)n);
    } else {
        addReplyProto(c, ",", 1);
        addReplyProto(c, buf, (size_t)n);
        addReplyProto(c, "\r\n", 2);
    }
}

void addReplyBulk(client *c, const void *p, size_t len) {
    addReplyLongLongWithPrefix(c, (long long)len, '$');
    addReplyProto(c, p, len);
    addReplyProto(c, "\r\n", 2);
}

void addReplyBulkSds(client *c, sds s) {
    addReplyBulk(c, s, sdslen(s));
    sdsfree(s);
}

void addReplyBulkCString(client *c, const char *s) {
    if (s == NULL) addReplyNull(c);
    else addReplyBulk(c, s, strlen(s));
}

void addReplyBulkLongLong(client *c, long long ll) {
    char buf[32];
    int n = ll2string(buf, sizeof(buf), ll);
    addReplyBulk(c, buf, (size_t)n);
}

/* A large value is queued by reference; see the top of the file. */
void addReplyStoreObj(client *c, storeObj *o) {
    const char *p = storeObjLocalPtr(o);
    if (p == NULL) {
        addReplyRemoteBytes(c, o, 0, o->len);
        return;
    }
    addReplyPoolBytes(c, o, p, o->len);
}

/* len bytes at p, inside one of o's local extents, as a bulk string. */
void addReplyPoolBytes(client *c, storeObj *o, const char *p, size_t len) {
    if (len < PROTO_REPLY_OBJ_MIN) {
        addReplyBulk(c, p, len);
        return;
    }
    addReplyLongLongWithPrefix(c, (long long)len, '$');
    addReplyRawPoolBytes(c, o, p, len);
    addReplyProto(c, "\r\n", 2);
}

/* len raw bytes at p, inside one of o's local extents (no bulk framing):
 * queued by reference when large, as addReplyPoolBytes. The replication
 * stream sends large values so (replication.c). */
void addReplyRawPoolBytes(client *c, storeObj *o, const char *p, size_t len) {
    if (len < PROTO_REPLY_OBJ_MIN) {
        addReplyProto(c, p, len);
        return;
    }
    if (prepareClientToWrite(c) != C_OK) return;
    replyBlock *b = zmalloc(sizeof(*b));
    storeObjIncrRef(o);
    b->obj = o;
    b->fill = NULL;
    b->ptr = p;
    b->size = b->used = len;
    appendBlock(c, b);
    c->reply_bytes += len;
    c->reply_ref_bytes += len;
    server.stat_reply_zero_copy++;
}

/* len raw bytes that fill computes when the writer first reaches them, not
 * now: a full sync's checksums of large values are so spread over the
 * writes that drain it rather than taken in one pass of the event loop
 * (replication.c). args (argslen bytes) are kept after the block's bytes
 * for fill to read; o, if given, is held until the block is written. */
void addReplyFilled(client *c, storeObj *o, size_t len, const void *args, size_t argslen,
                    void (*fill)(replyBlock *b)) {
    if (prepareClientToWrite(c) != C_OK) return;
    replyBlock *b = zmalloc(sizeof(*b) + len + argslen);
    if (o) storeObjIncrRef(o);
    b->obj = o;
    b->fill = fill;
    b->ptr = b->buf;
    b->size = b->used = len;
    memcpy(b->buf + len, args, argslen);
    appendBlock(c, b);
    c->reply_bytes += len;
}

void addReplyVerbatim(client *c, const char *s, size_t len, const char *ext) {
    if (c->resp == 2) {
        addReplyBulk(c, s, len);
        return;
    }
    char hdr[32];
    int n = snprintf(hdr, sizeof(hdr), "=%zu\r\n%s:", len + 4, ext);
    addReplyProto(c, hdr, (size_t)n);
    addReplyProto(c, s, len);
    addReplyProto(c, "\r\n", 2);
}

void addReplyHelp(client *c, const char **help) {
    sds cmd = sdsnew(c->argv[0]);
    sdstoupper(cmd);
    long long n = 0;
    while (help[n]) n++;
    addReplyArrayLen(c, n + 3); /* the first line, the lines, HELP and its line */
    sds first = sdscatprintf(sdsempty(), "%s <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", cmd);
    addReplyStatus(c, first);
    sdsfree(first);
    for (long long i = 0; i < n; i++) addReplyStatus(c, help[i]);
    addReplyStatus(c, "HELP");
    addReplyStatus(c, "    Prints this help.");
    sdsfree(cmd);
}

/* Integer arguments: the value, or an error reply and C_ERR. */
int getLongLongFromObjectOrReply(client *c, sds o, long long *target, const char *msg) {
    long long v;
    if (!string2ll(o, sdslen(o), &v)) {
        addReplyError(c, msg ? msg : "ERR value is not an integer or out of range");
        return C_ERR;
    }
    *target = v;
    return C_OK;
}

int getPositiveLongFromObjectOrReply(client *c, sds o, long long *target, const char *msg) {
    if (getLongLongFromObjectOrReply(c, o, target, msg) != C_OK) return C_ERR;
    if (*target < 0) {
        addReplyError(c, msg ? msg : "ERR value is out of range, must be positive");
        return C_ERR;
    }
    return C_OK;
}

/* ---- output limits ------------------------------------------------------- */

/* Returns 1 (and schedules the close) when the client went over its output
 * limit: the hard limit at once, the soft one after soft_seconds above it.
 * A subscribed client is held to the pubsub class (32mb, or 8mb for 60 s,
 * by default): messages arrive whether it reads or not, and this is what
 * bounds the memory a subscriber that stopped reading can make us hold. A
 * replica's link is held to the replica class by what it is behind
 * (replication.c: its snapshot does not count), never to the normal one,
 * which an operator may set low for ordinary clients. */
int checkClientOutputBufferLimits(client *c) {
    int replica = replClientIsReplica(c);
    int class = replica ? COB_REPLICA : (c->flags & (CLIENT_MONITOR | CLIENT_PUBSUB)) ? COB_PUBSUB : COB_NORMAL; /* monitor.c: why */
    cobLimit *l = &server.cob[class];
    unsigned long long used = replica ? replLinkBehind(c) : c->reply_bytes;
    int hard = l->hard && used >= l->hard;
    int soft = l->soft && used >= l->soft;
    /* The loop's cached clock: this runs for every reply queued behind a
     * full buffer (every message to a subscriber that lags), and soft
     * limits are counted in seconds. */
    mstime_t now = server.monotime;
    if (soft) {
        if (c->obuf_soft_limit_since == 0) {
            c->obuf_soft_limit_since = now;
            soft = 0;
        } else if (now - c->obuf_soft_limit_since <= l->soft_seconds * 1000) {
            soft = 0;
        }
    } else {
        c->obuf_soft_limit_since = 0;
    }
    if (!hard && !soft) return 0;
    if (!(c->flags & CLIENT_CLOSE_ASAP)) {
        sds info = catClientInfoString(sdsempty(), c);
        serverLog(LL_WARNING, "Client %s scheduled to be closed ASAP for overcoming of output buffer limits.", info);
        if (replica)
            serverLog(LL_WARNING, "Replication: replica %s is %llu bytes of records behind, past "
                      "client-output-buffer-limit replica: dropping its link (it will sync again)",
                      replLinkNodeId(c), used);
        sdsfree(info);
        server.stat_client_outbuf_limit_disconnections++;
        freeClientAsync(c);
    }
    return 1;
}

/* ---- writing ------------------------------------------------------------- */

static int clientHasPendingReplies(client *c) { return c->bufpos > 0 || c->reply_head != NULL; }

/* Sends as much as the socket takes: the static buffer, then blocks, many
 * per writev. Returns C_ERR if the client was freed. */
static int writeToClient(client *c, int handler_installed) {
    size_t total = 0;
    while (clientHasPendingReplies(c)) {
        struct iovec iov[IOV_BATCH];
        int n = 0;
        size_t off = c->sentlen, want = 0;
        if (c->bufpos > 0) {
            iov[n].iov_base = c->buf + off;
            iov[n].iov_len = c->bufpos - off;
            want += iov[n++].iov_len;
            off = 0;
        }
        for (replyBlock *b = c->reply_head; b && n < IOV_BATCH; b = b->next) {
            if (b->fill) {
                /* Filled only when within reach of this write. */
                if (want >= REPLY_FILL_AHEAD) break;
                b->fill(b);
                b->fill = NULL;
            }
            iov[n].iov_base = (char *)b->ptr + off;
            iov[n].iov_len = b->used - off;
            off = 0;
            if (iov[n].iov_len) want += iov[n++].iov_len;
        }
        ssize_t nw;
        if (c->pass_fd >= 0) {
            nw = anetSendWithFd(c->fd, iov, n, c->pass_fd);
            if (nw > 0) {
                close(c->pass_fd);
                c->pass_fd = -1;
            }
        } else {
            nw = writev(c->fd, iov, n);
        }
        if (nw <= 0) {
            if (nw == -1 && (errno == EAGAIN || errno == EINTR)) break;
            serverLog(LL_VERBOSE, "Error writing to client: %s", nw == 0 ? "closed" : strerror(errno));
            freeClientAsync(c);
            return C_ERR;
        }
        size_t left = (size_t)nw;
        total += left;
        c->net_out += left;
        server.stat_net_output_bytes += (long long)left;
        if (c->bufpos > 0) {
            size_t inbuf = c->bufpos - c->sentlen;
            if (left < inbuf) {
                c->sentlen += left;
                left = 0;
            } else {
                left -= inbuf;
                c->bufpos = c->sentlen = 0;
            }
        }
        while (left && c->reply_head) {
            replyBlock *b = c->reply_head;
            size_t inblk = b->used - c->sentlen;
            if (left < inblk) {
                c->sentlen += left;
                left = 0;
            } else {
                left -= inblk;
                c->sentlen = 0;
                c->reply_bytes -= b->used;
                if (b->obj && !b->fill) c->reply_ref_bytes -= b->used;
                c->reply_head = b->next;
                if (c->reply_head == NULL) c->reply_tail = NULL;
                freeReplyBlock(b);
            }
        }
        if (total > NET_MAX_WRITES_PER_EVENT) break;
        /* A short write means the socket is full (or at tcp-notsent-lowat):
         * the next writev would only say EAGAIN. */
        if ((size_t)nw < want) break;
    }
    if (!clientHasPendingReplies(c)) {
        c->sentlen = 0;
        if (handler_installed) aeDeleteFileEvent(server.el, c->fd, AE_WRITABLE);
        if (c->flags & CLIENT_CLOSE_AFTER_REPLY) {
            freeClientAsync(c);
            return C_ERR;
        }
    }
    return C_OK;
}

static void clientResumeIfRead(client *c);

static void writeHandler(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el, (void)fd, (void)mask;
    client *c = privdata;
    if (c->flags & CLIENT_REPL_WAIT) {
        /* Held for replicas' acks: clientQueueWrite sends it later. */
        aeDeleteFileEvent(server.el, c->fd, AE_WRITABLE);
        return;
    }
    if (writeToClient(c, 1) == C_OK && (c->flags & CLIENT_REPLY_PAUSED)) clientResumeIfRead(c);
}

void clientQueueWrite(client *c) {
    if (clientHasPendingReplies(c)) prepareClientToWrite(c);
}

int handleClientsWithPendingWrites(void) {
    int processed = 0;
    while (server.pending_writes_len) {
        client *c = server.pending_writes[--server.pending_writes_len];
        c->flags &= ~CLIENT_PENDING_WRITE;
        processed++;
        if (c->flags & (CLIENT_CLOSE_ASAP | CLIENT_REPL_WAIT)) continue;
        if (aeGetFileEvents(server.el, c->fd) & AE_WRITABLE) continue; /* handler will do it */
        if (writeToClient(c, 0) == C_ERR) continue;
        /* A paused client whose replies all went out here has no event to
         * wake it: the write handler fires at once on a writable socket
         * and resumes it (clientResumeIfRead). */
        if ((clientHasPendingReplies(c) || (c->flags & CLIENT_REPLY_PAUSED)) &&
            aeCreateFileEvent(server.el, c->fd, AE_WRITABLE, writeHandler, c) == AE_ERR)
            freeClientAsync(c);
    }
    return processed;
}

/* ---- reading and parsing ------------------------------------------------- */

#define ARGV_KEEP_MAX 1024 /* argv slots kept between commands */

void resetClient(client *c) {
    if (c->cmd) c->lastcmd = c->cmd;
    freeClientArgv(c);
    /* The argv arrays are kept for the next command, unless a large one
     * grew them: they would stay allocated, and counted, for good. */
    if (c->argv_cap > ARGV_KEEP_MAX) {
        zfree(c->argv);
        zfree(c->argobj);
        zfree(c->arglen);
        c->argv = NULL;
        c->argobj = NULL;
        c->arglen = NULL;
        c->argv_cap = 0;
    }
    if (c->relay) relayClientReset(c); /* the bytes it read for the command */
    c->expect_argc = 0;
    c->argerr = NULL;
    /* CLIENT REPLY SKIP silences the command after it: it set SKIP_NEXT,
     * which becomes SKIP for one command. */
    if (c->flags & (CLIENT_REPLY_SKIP | CLIENT_REPLY_SKIP_NEXT)) {
        c->flags &= ~CLIENT_REPLY_SKIP;
        if (c->flags & CLIENT_REPLY_SKIP_NEXT) c->flags = (c->flags & ~CLIENT_REPLY_SKIP_NEXT) | CLIENT_REPLY_SKIP;
    }
}

/* Argument memory, counted with the query buffer against
 * client-query-buffer-limit. Redis counts only the query buffer (and the
 * argument bytes under maxmemory-clients), so a request of millions of
 * empty arguments -- six bytes each on the wire, a pointer and an sds on
 * the heap -- grew the server by gigabytes under a 1 GiB limit. Here each
 * argument costs its bytes, ARG_HEAP_OVERHEAD for its sds header, NUL and
 * allocator rounding, and its slot in the argv arrays (counted by their
 * capacity, which is what is allocated). An estimate: it must never be
 * below the truth by more than a constant per argument. */
#define ARG_HEAP_OVERHEAD 16
/* The limit is checked every ARG_LIMIT_CHECK_EVERY arguments of a request
 * still arriving, and after any argument of ARG_LIMIT_CHECK_BYTES or more
 * (and after every read): a two-argument command pays nothing, and the
 * limit is passed by at most 64 small arguments (~66 kB) before it acts. */
#define ARG_LIMIT_CHECK_EVERY 64
#define ARG_LIMIT_CHECK_BYTES 1024
#define ARG_MIN_COST (ARG_HEAP_OVERHEAD + sizeof(sds))

static size_t clientArgvMemory(const client *c) {
    size_t slot = sizeof(sds) + (c->argobj ? sizeof(storeObj *) + sizeof(size_t) : 0);
    return c->argv_bytes + (size_t)c->argc * ARG_HEAP_OVERHEAD + (size_t)c->argv_cap * slot;
}

/* Whether the query buffer and the arguments parsed so far are past the
 * limit; if so the client is closed (as Redis closes one whose query
 * buffer is). */
static int clientInputOverLimit(client *c) {
    size_t buffered = sdslen(c->querybuf) - c->qb_pos + clientArgvMemory(c);
    /* A large argument read into the heap counts as it arrives; one read
     * into the pool does not: the pool's capacity (and eviction) bounds that. */
    if (c->big.len && c->argv[c->big.argi] && c->big.dst == c->argv[c->big.argi]) buffered += c->big.got;
    if ((long long)buffered <= server.client_max_querybuf_len) return 0;
    sds info = catClientInfoString(sdsempty(), c);
    serverLog(LL_WARNING, "Closing client that reached max query buffer length (arguments included): %s", info);
    sdsfree(info);
    server.stat_client_qbuf_limit_disconnections++;
    freeClientAsync(c);
    return 1;
}

static void ensureArgvRoom(client *c, int need) {
    if (need <= c->argv_cap) return;
    int cap = c->argv_cap ? c->argv_cap : 8;
    while (cap < need) cap *= 2;
    c->argv = zrealloc(c->argv, sizeof(sds) * (size_t)cap);
    if (c->argobj) {
        c->argobj = zrealloc(c->argobj, sizeof(storeObj *) * (size_t)cap);
        memset(c->argobj + c->argv_cap, 0, sizeof(storeObj *) * (size_t)(cap - c->argv_cap));
        c->arglen = zrealloc(c->arglen, sizeof(size_t) * (size_t)cap);
    }
    c->argv_cap = cap;
}

static void setProtocolError(client *c, const char *err) {
    serverLog(LL_VERBOSE, "Protocol error (%s) from client: id=%llu addr=%s", err,
              (unsigned long long)c->id, c->addr);
    addReplyErrorFormat(c, "ERR %s", err);
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    resetClient(c);
    respReqReset(&c->parser);
}

/* Runs the parsed command; returns C_ERR if the client must not be used
 * any more (it was scheduled for closing). */
static int executeParsedCommand(client *c) {
    c->flags |= CLIENT_MAY_BLOCK;
    int rc = processCommand(c);
    c->flags &= ~CLIENT_MAY_BLOCK;
    if (c->flags & CLIENT_RERUN) {
        /* Blocked before it replied or changed anything: the arguments
         * stay for the run that follows (resumeBlockedCommand). */
        return rc != C_OK || (c->flags & CLIENT_CLOSE_ASAP) ? C_ERR : C_OK;
    }
    resetClient(c);
    c->parser.unauthenticated = !c->authenticated;
    c->parser.max_bulk_len = server.proto_max_bulk_len;
    if (rc != C_OK || (c->flags & CLIENT_CLOSE_ASAP)) return C_ERR;
    return C_OK;
}

/* The header of a large argument arrived. Choose its destination, move in
 * the bytes already buffered, and leave the rest to readQueryFromClient. */
static void startBigArg(client *c, size_t len) {
    int argi = c->argc;
    char *dst = NULL;
    serverCommand *cmd = argi > 0 ? lookupCommand(c->argv, argi) : NULL;
    ensureArgvRoom(c, argi + 1);
    c->argv[argi] = NULL;
    /* Placed only for a command this user may run: SEG.WRITE's hook writes
     * into an existing object (and checks its key itself, t_data.c). */
    if (cmd && cmd->bigarg && c->authenticated && aclUserCanRun(c->user, cmd)) {
        if (c->argobj == NULL) {
            c->argobj = zcalloc(sizeof(storeObj *) * (size_t)c->argv_cap);
            c->arglen = zcalloc(sizeof(size_t) * (size_t)c->argv_cap);
        }
        c->arglen[argi] = len;
        dst = cmd->bigarg(c, argi, len);
    }
    if (dst == NULL && c->argerr == NULL && len > SDS_MAX_LEN) {
        /* The heap holds arguments as sds (< 4 GiB): refuse, discard the bytes. */
        c->argerr = "ERR argument too large for this command";
    }
    if (dst == NULL && c->argerr == NULL) {
        c->argv[argi] = sdsnewlen(NULL, len);
        dst = c->argv[argi];
    } else {
        c->argv[argi] = sdsempty();
        if (dst) server.stat_bigarg_inplace++;
    }
    c->big.dst = dst;
    c->big.len = len;
    c->big.got = 0;
    c->big.crlf_got = 0;
    c->big.argi = argi;
    /* Bytes that came with the header. */
    size_t avail = sdslen(c->querybuf) - c->qb_pos;
    size_t take = avail < len ? avail : len;
    if (dst) memcpy(dst, c->querybuf + c->qb_pos, take);
    c->big.got = take;
    c->qb_pos += take;
    avail -= take;
    while (c->big.got == len && c->big.crlf_got < 2 && avail) {
        c->big.crlf[c->big.crlf_got++] = c->querybuf[c->qb_pos++];
        avail--;
    }
}

/* Called when the payload and its CRLF are complete. */
static int finishBigArg(client *c) {
    if (c->big.crlf[0] != '\r' || c->big.crlf[1] != '\n') {
        abortBigArg(c);
        setProtocolError(c, "Protocol error: expected CRLF after bulk");
        return C_ERR;
    }
    c->argv_bytes += c->big.len;
    c->argc = c->big.argi + 1;
    memset(&c->big, 0, sizeof(c->big));
    respReqBigArgDone(&c->parser);
    return C_OK;
}

/* Replies a client does not read. Its commands' replies queue in the heap
 * (or hold pool space) until it reads them, and a client that pipelines
 * GETs without ever reading made the server hold all of them: 3.2 GB in
 * 8 s from one connection, under the default `normal 0 0 0` output limit
 * (found probing). Dropping such a client would also drop the honest one
 * that pipelines a deep batch and reads it late, so instead its commands
 * wait: once client-reply-pause-limit bytes of its replies are unsent, no
 * further request of it runs (it stays in the query buffer, still read,
 * still bounded by client-query-buffer-limit, past which the client is
 * closed and logged) until the socket has taken them below the limit
 * (writeHandler). The replies it holds are then bounded by the limit plus
 * one command's. Subscribers, monitors and replicas' links are not paused:
 * what they are sent does not come from their requests, and the pubsub and
 * replica output limits bound them. The test runs where a request starts,
 * so a paused client holds no half-parsed arguments. */
static int clientRepliesUnread(client *c) {
    return server.client_reply_pause_limit && c->reply_bytes >= (unsigned long long)server.client_reply_pause_limit &&
           !(c->flags & (CLIENT_MONITOR | CLIENT_PUBSUB)) && !replClientIsReplica(c);
}

static void processInputBuffer(client *c) {
    int prefetched = 0; /* requests ahead whose keys prefetchPipeline asked for */
    while (!(c->flags & (CLIENT_CLOSE_AFTER_REPLY | CLIENT_CLOSE_ASAP | CLIENT_BLOCKED))) {
        /* Where a request starts: once per batch, prefetch the keys of the
         * complete requests ahead (prefetch.c). It changes nothing. */
        if (c->argc == 0 && !c->parser.in_array && !c->big.len) {
            if (c->qb_pos < sdslen(c->querybuf) && clientRepliesUnread(c)) {
                if (!(c->flags & CLIENT_REPLY_PAUSED)) server.stat_client_reply_pauses++;
                c->flags |= CLIENT_REPLY_PAUSED;
                break;
            }
            if (prefetched > 0) prefetched--;
            else if (server.prefetch_batch && (prefetched = prefetchPipeline(c)) > 0) prefetched--;
        }
        if (c->big.len) {
            if (c->big.got < c->big.len || c->big.crlf_got < 2) break;
            if (finishBigArg(c) != C_OK) break;
            if (c->argc == c->expect_argc && executeParsedCommand(c) != C_OK) break;
            continue;
        }
        respTok tok;
        size_t used;
        int t = respReqNext(&c->parser, c->querybuf + c->qb_pos, sdslen(c->querybuf) - c->qb_pos,
                            &used, &tok);
        c->qb_pos += used;
        if (t == RESP_MORE) break;
        if (t == RESP_ERR) {
            setProtocolError(c, tok.err);
            break;
        }
        if (t == RESP_ARRAY) {
            /* A count whose empty arguments alone could not fit under the
             * limit is refused before anything arrives. */
            if ((unsigned long long)tok.n > (unsigned long long)server.client_max_querybuf_len / ARG_MIN_COST) {
                setProtocolError(c, "Protocol error: invalid multibulk length");
                break;
            }
            c->expect_argc = tok.n;
            /* Grow as arguments arrive: "*2000000000" must not allocate. */
            ensureArgvRoom(c, tok.n < 1024 ? (int)tok.n : 1024);
        } else if (t == RESP_ARG) {
            ensureArgvRoom(c, c->argc + 1);
            if (c->argobj) c->argobj[c->argc] = NULL;
            c->argv[c->argc++] = sdsnewlen(tok.ptr, tok.len);
            c->argv_bytes += tok.len;
            if (c->argc == c->expect_argc) {
                if (executeParsedCommand(c) != C_OK) break;
            } else if ((c->argc % ARG_LIMIT_CHECK_EVERY == 0 || tok.len >= ARG_LIMIT_CHECK_BYTES) &&
                       clientInputOverLimit(c)) {
                break;
            }
        } else if (t == RESP_BIGARG) {
            startBigArg(c, (size_t)tok.n);
        } else if (t == RESP_INLINE) {
            int argc;
            sds line = sdsnewlen(tok.ptr, tok.len);
            sds *argv = sdssplitargs(line, &argc);
            sdsfree(line);
            if (argv == NULL) {
                setProtocolError(c, "Protocol error: unbalanced quotes in request");
                break;
            }
            if (argc == 0) {
                zfree(argv);
                continue;
            }
            ensureArgvRoom(c, argc);
            for (int j = 0; j < argc; j++) {
                if (c->argobj) c->argobj[j] = NULL;
                c->argv[j] = argv[j];
                c->argv_bytes += sdslen(argv[j]);
            }
            c->argc = argc;
            c->expect_argc = argc;
            zfree(argv);
            if (executeParsedCommand(c) != C_OK) break;
        }
    }
    /* Drop what was consumed, keep the tail for the next read. The tail
     * may be long: a pipeline waiting behind a pause (clientRepliesUnread)
     * or a blocked command. Moving it down each time a few of its commands
     * ran would cost O(tail) per resume, O(n^2) for the whole pipeline, so
     * the consumed head goes only once it is half the buffer or more: each
     * byte is moved O(1) times. */
    if (c->qb_pos) {
        size_t len = sdslen(c->querybuf);
        if (c->qb_pos == len) {
            sdsclear(c->querybuf);
            c->qb_pos = 0;
        } else if (c->qb_pos >= len / 2) {
            serverVisit(VISITS_QUERYBUF, len - c->qb_pos);
            sdsrange(c->querybuf, (ssize_t)c->qb_pos, -1);
            c->qb_pos = 0;
        }
    }
}

/* While a payload of PROTO_LOWAT_ARG or more is read in place, the socket
 * reports readable only once PROTO_LOWAT bytes (or all that is left) are
 * queued. Without it the loop, busy or not, wakes for every few segments and
 * each small read sends the client a window update; on loopback each of those
 * makes the sender's kernel run its transmit path (and BBR's pacing timer) once
 * more. Measured with redis-benchmark SET of 4 MiB values: ~14 reads per
 * value, 805 -> 920 SET/s (Redis: 655); 1 MiB unchanged. Back to 1 the moment
 * the payload is in, so the next small command is not held back; EOF and
 * errors wake the loop whatever the low-water mark. */
static void setBigArgLowat(client *c) {
    if (c->flags & (CLIENT_UNIX_SOCKET | CLIENT_CLOSE_ASAP)) return;
    int want = 1;
    if (c->big.len >= PROTO_LOWAT_ARG) {
        size_t left = c->big.len - c->big.got + (size_t)(2 - c->big.crlf_got);
        want = left < PROTO_LOWAT ? (int)left : PROTO_LOWAT;
    }
    if (want == (c->rcvlowat ? c->rcvlowat : 1)) return;
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0) c->rcvlowat = want;
}

void readQueryFromClient(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el, (void)mask;
    client *c = privdata;
    ssize_t nread;
    if (c->flags & (CLIENT_CLOSE_ASAP | CLIENT_CLOSE_AFTER_REPLY)) {
        /* Stop reading; drain nothing more into a client that is going. */
        aeDeleteFileEvent(server.el, fd, AE_READABLE);
        return;
    }
    if (c->big.len && (c->big.got < c->big.len || c->big.crlf_got < 2)) {
        /* In place: payload, then its CRLF, then whatever follows goes to
         * the query buffer, all in one readv. */
        struct iovec iov[3];
        int n = 0;
        static char discard[64 * 1024];
        size_t want = c->big.len - c->big.got;
        if (want) {
            iov[n].iov_base = c->big.dst ? c->big.dst + c->big.got : discard;
            iov[n].iov_len = c->big.dst ? want : (want < sizeof(discard) ? want : sizeof(discard));
            n++;
        }
        /* A discard window shorter than the payload must be the only
         * iovec, or the kernel would spill payload bytes into the CRLF. */
        if (want == 0 || iov[0].iov_len == want) {
            iov[n].iov_base = c->big.crlf + c->big.crlf_got;
            iov[n].iov_len = (size_t)(2 - c->big.crlf_got);
            n++;
            c->querybuf = sdsMakeRoomFor(c->querybuf, PROTO_IOBUF_LEN);
            size_t qlen = sdslen(c->querybuf);
            iov[n].iov_base = c->querybuf + qlen;
            iov[n].iov_len = sdsavail(c->querybuf);
            n++;
        }
        nread = readv(fd, iov, n);
        if (nread > 0) {
            size_t left = (size_t)nread;
            size_t k = want ? (left < iov[0].iov_len ? left : iov[0].iov_len) : 0;
            c->big.got += k;
            left -= k;
            if (c->big.got == c->big.len) {
                size_t cr = left < (size_t)(2 - c->big.crlf_got) ? left : (size_t)(2 - c->big.crlf_got);
                c->big.crlf_got += (int)cr;
                left -= cr;
                /* A short first iovec means the kernel stopped there, so the
                 * remaining bytes really are the query-buffer part. */
                if (left) sdsIncrLen(c->querybuf, (ssize_t)left);
            }
        }
    } else {
        c->querybuf = sdsMakeRoomFor(c->querybuf, PROTO_IOBUF_LEN);
        size_t qlen = sdslen(c->querybuf);
        size_t readlen = sdsavail(c->querybuf);
        nread = read(fd, c->querybuf + qlen, readlen);
        if (nread > 0) sdsIncrLen(c->querybuf, nread);
    }
    if (nread == -1) {
        if (errno == EAGAIN || errno == EINTR) return;
        serverLog(LL_VERBOSE, "Reading from client: %s", strerror(errno));
        freeClientAsync(c);
        return;
    }
    if (nread == 0) {
        serverLog(LL_VERBOSE, "Client closed connection id=%llu addr=%s",
                  (unsigned long long)c->id, c->addr);
        freeClientAsync(c);
        return;
    }
    c->lastinteraction = server.monotime;
    c->net_in += (unsigned long long)nread;
    server.stat_net_input_bytes += nread;
    if (sdslen(c->querybuf) > c->querybuf_peak) c->querybuf_peak = sdslen(c->querybuf);
    if (clientInputOverLimit(c)) return;
    server.current_client = c;
    processInputBuffer(c);
    server.current_client = NULL;
    setBigArgLowat(c);
}

/* A paused client's socket took enough of its replies: what it pipelined
 * meanwhile runs now, as a read would run it. */
static void clientResumeIfRead(client *c) {
    if (clientRepliesUnread(c)) return;
    c->flags &= ~CLIENT_REPLY_PAUSED;
    if (c->flags & (CLIENT_CLOSE_ASAP | CLIENT_CLOSE_AFTER_REPLY | CLIENT_BLOCKED)) return;
    client *prev = server.current_client;
    server.current_client = c;
    processInputBuffer(c);
    setBigArgLowat(c);
    server.current_client = prev;
}

/* ---- blocked clients ------------------------------------------------------ */

/* A command that must wait (a topology change waits for etcd's commit)
 * blocks its client: the reply comes later, and until then the client's
 * further requests stay in its query buffer, so a pipeline's replies keep
 * their order. Reading goes on; the query buffer limit still applies. */
void blockClient(client *c, struct clusterOp *op) {
    if (!(c->flags & CLIENT_BLOCKED)) server.blocked_clients++;
    c->flags |= CLIENT_BLOCKED;
    c->blocked_op = op;
}

/* ---- CLIENT PAUSE ----------------------------------------------------------
 *
 * CLIENT PAUSE ms [WRITE|ALL] stops, until ms have passed or CLIENT UNPAUSE,
 * every command (ALL) or every command that could change the dataset
 * (WRITE: the write commands, EXEC of a transaction holding one, PUBLISH
 * and SPUBLISH, as Redis's "may replicate"), from every client but the
 * replicas' links. Operators use it to let replicas catch up before a
 * switch-over, or to hold writers while a proxy moves them. As in Redis,
 * a paused command is one not yet run: its client is blocked with its
 * arguments kept (CLIENT_BLOCKED | CLIENT_RERUN, as relay.c's reads), what
 * it pipelined waits in its query buffer, and when the pause ends each
 * command goes through processCommand again, every check made afresh, in
 * the order the clients were paused. Reads go on under WRITE. Under ALL
 * even CLIENT UNPAUSE waits (Redis 7.0 does the same): the timeout ends it.
 *
 * The end is checked in beforeSleep; a time event at the end wakes the
 * loop then, so a pause lasts its ms and no cron tick more. Resuming
 * happens there too, never inside a command: CLIENT UNPAUSE only ends the
 * pause, and its own reply goes before the commands it released. A
 * client is not closed by `timeout` while it waits.
 *
 * The dataset holds still too, as in Redis (its expireIfNeeded and
 * performEvictions ask the same): what a pause is for -- replicas catching
 * up, a failover -- needs the keys not to move under it, and an expiry
 * or an eviction is a DEL sent to the replicas and the log. So no key is
 * expired or evicted while it lasts (pauseHoldsDataset): not by the cron
 * (server.c), not by an eviction round's slices in beforeSleep, not by an
 * allocation that would make room (a large SET value placed as it
 * arrives, store.c), and not by a lookup: a read of an expired key
 * answers as if it were gone, and the key goes when the pause ends. */

int pauseHoldsDataset(void) {
    return server.pause_type != PAUSE_NONE && server.pause_end_ms > server.monotime;
}

static int isWriteLike(const serverCommand *cmd) {
    return (cmd->flags & CMD_WRITE) || cmd->proc == publishCommand || cmd->proc == spublishCommand;
}

int pauseBlocksCommand(client *c) {
    if (server.pause_type == PAUSE_NONE || c->repl) return 0;
    if (server.pause_end_ms <= server.monotime) return 0; /* over; beforeSleep releases the rest */
    if (server.pause_type == PAUSE_WRITE) {
        int writes = isWriteLike(c->cmd);
        for (int i = 0; !writes && c->cmd->proc == execCommand && i < c->mstate.count; i++)
            writes = isWriteLike(c->mstate.cmds[i].cmd);
        if (!writes) return 0;
    }
    if (server.npaused == server.paused_cap) {
        server.paused_cap = server.paused_cap ? server.paused_cap * 2 : 16;
        server.paused = zrealloc(server.paused, sizeof(client *) * (size_t)server.paused_cap);
    }
    c->pause_slot = server.npaused;
    server.paused[server.npaused++] = c;
    blockClient(c, NULL);
    c->flags |= CLIENT_RERUN | CLIENT_PAUSED;
    return 1;
}

static int pauseTimerProc(aeEventLoop *el, long long id, void *data) {
    (void)el, (void)id, (void)data;
    server.pause_timer = -1; /* beforeSleep, right after, sees the end */
    return AE_NOMORE;
}

/* A new pause keeps the later end of the two, and takes the new type (a
 * WRITE after an ALL narrows it: the reads it held go), as Redis 7.0. */
void pauseClients(int type, long long end_ms) {
    if (server.pause_type == PAUSE_NONE || end_ms > server.pause_end_ms) server.pause_end_ms = end_ms;
    if (type < server.pause_type) server.pause_released = 1;
    server.pause_type = type;
    if (server.pause_timer != -1) aeDeleteTimeEvent(server.el, server.pause_timer);
    long long wait = server.pause_end_ms - monoMs();
    server.pause_timer = aeCreateTimeEvent(server.el, wait > 0 ? wait : 0, pauseTimerProc, NULL, NULL);
}

void unpauseClients(void) {
    server.pause_type = PAUSE_NONE;
    server.pause_released = 1;
    if (server.pause_timer != -1) aeDeleteTimeEvent(server.el, server.pause_timer);
    server.pause_timer = -1;
}

/* A client freed while it waits leaves a hole in the list, skipped when
 * the list is run: O(1), where a search and a move cost a mass kill of
 * paused clients a quadratic walk. */
void pauseClientGone(client *c) {
    server.paused[c->pause_slot] = NULL;
}

/* Only when the pause ended or narrowed: the held commands are looked at
 * once per release, not once per event-loop iteration while it lasts. */
void pauseBeforeSleep(void) {
    if (server.pause_type != PAUSE_NONE && server.pause_end_ms <= monoMs()) unpauseClients();
    if (!server.pause_released) return;
    server.pause_released = 0;
    if (server.npaused == 0) return;
    /* Under a narrower pause (ALL then WRITE) reads go now; a command that
     * is still covered blocks again, joining the list behind the others. */
    int n = server.npaused;
    client **batch = zmalloc(sizeof(client *) * (size_t)n);
    memcpy(batch, server.paused, sizeof(client *) * (size_t)n);
    server.npaused = 0;
    for (int i = 0; i < n; i++) {
        client *c = batch[i];
        server.visits[VISITS_PAUSED]++;
        if (c == NULL) continue; /* freed while it waited */
        c->flags &= ~(CLIENT_RERUN | CLIENT_PAUSED);
        /* Freed meanwhile by an earlier one's command (CLIENT KILL)? It is
         * no longer in the client list then; a kill only marks it. */
        resumeBlockedCommand(c);
    }
    zfree(batch);
}

/* The wait is over and the reply is queued: run what was pipelined. */
void unblockClient(client *c) {
    if (c->flags & CLIENT_BLOCKED) server.blocked_clients--;
    c->flags &= ~CLIENT_BLOCKED;
    c->blocked_op = NULL;
    if (c->flags & (CLIENT_CLOSE_ASAP | CLIENT_CLOSE_AFTER_REPLY)) return;
    client *prev = server.current_client;
    server.current_client = c;
    processInputBuffer(c);
    server.current_client = prev;
}

/* A command that blocked before replying (CLIENT_RERUN, cleared by the
 * caller: relay.c, once the bytes it waited for are here) runs again from
 * the arguments it kept, through processCommand, so every check is made
 * afresh; then what was pipelined behind it. A client on its way out
 * keeps its arguments for freeClient. */
void resumeBlockedCommand(client *c) {
    if (c->flags & CLIENT_BLOCKED) server.blocked_clients--;
    c->flags &= ~CLIENT_BLOCKED;
    if (c->flags & (CLIENT_CLOSE_ASAP | CLIENT_CLOSE_AFTER_REPLY)) return;
    client *prev = server.current_client;
    server.current_client = c;
    if (executeParsedCommand(c) == C_OK) {
        processInputBuffer(c);
        setBigArgLowat(c);
    }
    server.current_client = prev;
}

/* ---- idle clients and buffers -------------------------------------------- */

/* An idle client keeps neither its 16 KiB reply buffer nor its query
 * buffer: 10k idle connections would otherwise hold 320 MiB between them.
 * Both come back (one allocation each) with the client's next request. A
 * buffer holding replies not yet sent, or a large argument being read in
 * place, is kept. A partial request is kept at its size: a client that
 * sends a byte now and then and never ends its request (slowloris) held
 * the 32 KiB the read had made room for, ~42 KB a connection in all (found
 * probing: 2000 such connections, 83 MB, for as long as they stayed). */
void clientShrinkIdleBuffers(client *c) {
    if (c->buf && c->bufpos == 0 && c->reply_head == NULL) {
        zfree(c->buf);
        c->buf = NULL;
        c->buf_peak = 0;
    }
    if (c->big.len) return;
    size_t len = sdslen(c->querybuf);
    if (len == 0 && sdsalloc(c->querybuf) > 0) {
        sdsfree(c->querybuf);
        c->querybuf = sdsempty();
        c->querybuf_peak = 0;
        c->qb_pos = 0;
    } else if (len && sdsavail(c->querybuf) + c->qb_pos > len - c->qb_pos + 1024) {
        if (c->qb_pos) sdsrange(c->querybuf, (ssize_t)c->qb_pos, -1);
        c->qb_pos = 0;
        c->querybuf = sdsRemoveFreeSpace(c->querybuf);
        c->querybuf_peak = sdslen(c->querybuf);
    }
}

/* Called from serverCron: visits about 1/hz of the clients each time
 * (all of them once a second), rotating the list so every client is seen. */
void clientsCron(void) {
    unsigned long iterations = server.nclients / (unsigned long)server.hz;
    if (iterations < 50) iterations = server.nclients < 50 ? server.nclients : 50;
    mstime_t now = monoMs();
    while (iterations-- && server.clients_head) {
        client *c = server.clients_head;
        /* Rotate: head to tail. */
        if (c->next) {
            server.clients_head = c->next;
            c->next->prev = NULL;
            server.clients_tail->next = c;
            c->prev = server.clients_tail;
            c->next = NULL;
            server.clients_tail = c;
        }
        /* A subscriber only listens: silence is its normal state (Redis
         * exempts it from `timeout` too). */
        if (server.maxidletime && (now - c->lastinteraction) / 1000 > server.maxidletime &&
            !(c->flags & (CLIENT_CLOSE_ASAP | CLIENT_PUBSUB | CLIENT_PAUSED))) {
            serverLog(LL_VERBOSE, "Closing idle client id=%llu addr=%s",
                      (unsigned long long)c->id, c->addr);
            freeClientAsync(c);
            continue;
        }
        if (c->reply_bytes) checkClientOutputBufferLimits(c);
        if (now - c->lastinteraction > CLIENT_IDLE_SHRINK_MS) clientShrinkIdleBuffers(c);
        if (c->leases) clientLeasesPrune(c, 0);
    }
}
