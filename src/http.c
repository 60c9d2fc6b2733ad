/* http.c -- the HTTP endpoints inference engines poll.
 *
 * Engines that use Mooncake Store reach its master over HTTP as well as
 * over RPC: SGLang's HiCache connector polls GET /get_all_segments at
 * start-up until the body is non-empty, operators and probes ask /health,
 * and /query_key shows where an object's replicas are. This file serves
 * those paths in upstream Mooncake's formats (its master_admin_service) on a
 * port of the server's own, http-port, off by default. docs/PROTOCOL.md,
 * "HTTP endpoints", is the reference for what each path answers.
 *
 * One thread. libmicrohttpd parses HTTP -- nothing here reads the protocol
 * by hand -- but runs no thread of its own: its daemon is started in epoll
 * mode without MHD_USE_INTERNAL_POLLING_THREAD, its epoll descriptor is one
 * readable file event in ae, and MHD_run() is called when that fires. So a
 * handler runs between two commands, as a command does, and reads the
 * keyspace and the segment table without a lock. The library reads what a
 * socket has and returns: a client that sends half a request costs a
 * connection slot and a buffer, never a wait. Its timeouts are kept by a
 * timer re-armed after every run from MHD_get_timeout(), at most
 * HTTP_TICK_MS away.
 *
 * Bounds, each a directive: http-maxclients connections (past it, new ones
 * wait in the listen backlog until one closes), http-max-request-size bytes
 * for the request line and headers (the library answers 414 or 431 past
 * it), http-timeout seconds of idleness -- and as long for a request's
 * headers to arrive whole: the library's timeout is one of idleness only,
 * so a client sending a byte a second kept its slot for ever, and
 * http-maxclients of them kept every probe out. httpConn notes when each
 * connection began waiting for headers; httpReapSlow, a tick apart,
 * shuts down the socket of one that waited too long, and the library
 * closes it. No path takes a body: a request that announces one is
 * answered 413 before a byte of it is read, and its connection is closed
 * (the library's "early response").
 *
 * Routes. One row per path in httpRoutes, as commands are rows of the
 * command table: the handler, and the RESP command whose ACL permission
 * the path needs. A path shows a user what that command would show it and
 * no more: /get_all_segments is SEGMENTS (a tenant sees its own segments
 * and the shared ones), /query_key is OBJECT.INFO of the key (key patterns
 * apply), /health is PING. /metrics (Prometheus) will be one more row.
 *
 * Identity. With no password anywhere (default on and nopass) the paths
 * are open, as RESP is. Otherwise a request needs HTTP Basic credentials
 * -- user `default` for requirepass -- decoded here as bytes (a password
 * may hold a zero byte, as AUTH's may) and checked by the function AUTH uses;
 * a failure is 401 with a WWW-Authenticate challenge, an ACL LOG entry
 * (reason auth) and acl_access_denied_auth, as a failed AUTH is. Nothing
 * is remembered between requests, so an ACL change applies to the next one.
 *
 * Reconfiguration. CONFIG SET of an http-* directive starts a daemon with
 * the new settings before the old one stops, so a refusal (a busy port)
 * leaves the old one serving. When the address stays, the new daemon gets
 * a dup() of the old listening socket and the connections in its backlog
 * are kept. Open HTTP connections are closed: pollers reconnect.
 */
#include "http.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "acl.h"
#include "replication.h"
#include "anet.h"
#include "cluster.h"
#include "segment.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

#define HTTP_TICK_MS 1000      /* MHD_run at least this often while listening */
#define HTTP_REALM "mooncake"
#define HTTP_ALLOW "GET, HEAD"
#define CT_JSON "application/json"
#define CT_TEXT "text/plain; version=0.0.4" /* upstream's, for line lists and (later) /metrics */

/* Upstream's error codes (mooncake-store's ErrorCode), so its clients read
 * ours unchanged. */
#define ERRC_INVALID_PARAMS -600
#define ERRC_REPLICA_IS_NOT_READY -703
#define ERRC_OBJECT_NOT_FOUND -704
#define ERRC_UNAVAILABLE_IN_CURRENT_MODE -1011

/* One request, from its complete headers to the reply its handler leaves. */
typedef struct httpRequest {
    struct MHD_Connection *conn;
    const char *method, *path;
    user *user;
    /* The reply. */
    unsigned int status;
    const char *ctype;
    sds body;
    int challenge;          /* 401: send WWW-Authenticate */
    int allow;              /* 405: send Allow */
} httpRequest;

typedef void httpHandler(httpRequest *req);

typedef struct httpRoute {
    const char *path;
    httpHandler *proc;
    const char *permission; /* the command whose ACL permission it needs */
    serverCommand *cmd;         /* permission's row, found at the first start */
} httpRoute;

static void healthHandler(httpRequest *req);
static void getAllSegmentsHandler(httpRequest *req);
static void queryKeyHandler(httpRequest *req);

static httpRoute httpRoutes[] = {
    {"/health", healthHandler, "ping", NULL},
    {"/get_all_segments", getAllSegmentsHandler, "segments", NULL},
    {"/query_key", queryKeyHandler, "object.info", NULL},
    {"/query", queryKeyHandler, "object.info", NULL}, /* an alias of upstream's name */
    {NULL, NULL, NULL, NULL}};

/* An open connection, in the list httpReapSlow walks: since when it has
 * been waiting for a request's headers (ms; 0 while one is answered). */
typedef struct httpConn {
    struct MHD_Connection *conn;
    long long since;
    struct httpConn *prev, *next;
} httpConn;

static httpConn *httpConns;

/* The running daemon and what it was started with. */
static struct {
    struct MHD_Daemon *daemon;
    int listenfd;           /* the daemon's: MHD_stop_daemon closes it */
    int epfd;               /* the daemon's epoll fd, a file event in ae */
    long long timer;        /* ae timer, -1: none */
    int port;
    sds bind;
    long long maxclients, timeout, maxreq;
    long long connected;    /* open connections */
    long long closed;       /* connections closed so far: see httpRun */
} http = {NULL, -1, -1, -1, 0, NULL, 0, 0, 0, 0, 0};

/* ---- replies -------------------------------------------------------------- */

static void reply(httpRequest *req, unsigned int status, const char *ctype, sds body) {
    sdsfree(req->body);
    req->status = status;
    req->ctype = ctype;
    req->body = body;
}

/* Takes j's reference. Compact, in insertion order, as upstream writes it. */
static void replyJson(httpRequest *req, unsigned int status, json_t *j) {
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    reply(req, status, CT_JSON, sdsnew(text ? text : "{\"success\":false,\"error\":\"out of memory\"}"));
    free(text);
}

/* A JSON string of any bytes. Names and endpoints are checked printable at
 * MOUNT, but HOST is not, nor is a user name an error quotes: bytes that are not UTF-8 are written \xNN, so the
 * document stays valid and nothing is lost silently. */
static json_t *jsonBytes(const char *p, size_t len) {
    json_t *j = json_stringn(p, len);
    if (j) return j;
    sds s = sdsempty();
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)p[i];
        s = (ch >= 0x20 && ch < 0x7f) ? sdscatlen(s, p + i, 1) : sdscatprintf(s, "\\x%02x", ch);
    }
    j = json_stringn(s, sdslen(s));
    sdsfree(s);
    return j;
}

/* Upstream's short error: {"success":false,"error":"..."}. Through
 * jsonBytes: json_pack's "s" refuses text that is not UTF-8, and a 403
 * naming such a user said "out of memory" instead. */
static void replyError(httpRequest *req, unsigned int status, const char *msg) {
    replyJson(req, status, json_pack("{s:b,s:o}", "success", 0, "error", jsonBytes(msg, strlen(msg))));
}

/* Upstream's coded error: {"success":false,"error_code":N,"error_message":"NAME"}. */
static void replyCodedError(httpRequest *req, unsigned int status, int code, const char *name) {
    replyJson(req, status, json_pack("{s:b,s:i,s:s}", "success", 0, "error_code", code, "error_message", name));
}

static enum MHD_Result httpSend(httpRequest *req) {
    sds body = req->body ? req->body : sdsempty();
    req->body = NULL;
    struct MHD_Response *r = MHD_create_response_from_buffer(sdslen(body), body, MHD_RESPMEM_MUST_COPY);
    sdsfree(body);
    if (r == NULL) return MHD_NO; /* the library closes the connection */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, req->ctype);
    if (req->allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, HTTP_ALLOW);
    enum MHD_Result rc = req->challenge ? MHD_queue_basic_auth_fail_response(req->conn, HTTP_REALM, r)
                                        : MHD_queue_response(req->conn, req->status, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---- identity and permission ----------------------------------------------- */

static int connFd(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* What ACL LOG's client-info says of an HTTP request, CLIENT LIST-shaped. */
static sds httpClientInfo(httpRequest *req, const char *username) {
    char ip[NET_IP_STR_LEN] = "?", lip[NET_IP_STR_LEN] = "?", addr[NET_ADDR_STR_LEN], laddr[NET_ADDR_STR_LEN];
    int port = 0, lport = 0, fd = connFd(req->conn);
    if (fd != -1) {
        anetFdToString(fd, ip, sizeof(ip), &port, 1);
        anetFdToString(fd, lip, sizeof(lip), &lport, 0);
    }
    anetFormatAddr(addr, sizeof(addr), ip, port);
    anetFormatAddr(laddr, sizeof(laddr), lip, lport);
    sds request = sdscatprintf(sdsempty(), "%s %s", req->method, req->path);
    sds s = sdscatprintf(sdsempty(), "id=0 addr=%s laddr=%s fd=%d name= user=%s proto=http cmd=", addr, laddr, fd,
                         username);
    s = sdscatrepr(s, request, sdslen(request)); /* the path is decoded: any bytes */
    sdsfree(request);
    return s;
}

/* RESP's protected mode, for HTTP: without a password only the loopback
 * interface may ask. */
static int httpProtectedRefusal(httpRequest *req) {
    if (!server.protected_mode || aclDefaultUserHasPassword()) return 0;
    char ip[NET_IP_STR_LEN];
    int port, fd = connFd(req->conn);
    if (fd == -1 || anetFdToString(fd, ip, sizeof(ip), &port, 1) == -1 || anetIsLoopback(ip)) return 0;
    replyError(req, MHD_HTTP_FORBIDDEN,
               "DENIED protected mode is on and the default user has no password: only loopback clients may "
               "connect (set requirepass, or protected-mode no)");
    return 1;
}

/* The Basic credentials of the request, "name:password" decoded, or NULL
 * when it gives none that parse. Read here rather than by the library's
 * MHD_basic_auth_get_username_password: that one hands back C strings, so
 * a password sent as "pa\0junk" was checked as "pa" -- a wrong password
 * taken -- and one holding a zero byte (requirepass is binary-safe) could
 * never be given. *colon: where the name ends. */
static sds httpBasicCredentials(struct MHD_Connection *conn, size_t *colon) {
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h == NULL || strncasecmp(h, "Basic ", 6)) return NULL;
    h += 6;
    size_t len = strlen(h);
    while (*h == ' ') h++, len--;
    while (len && h[len - 1] == ' ') len--;
    sds cred = base64Decode(h, len);
    const char *c = cred ? memchr(cred, ':', sdslen(cred)) : NULL;
    if (c == NULL) {
        sdsfree(cred);
        return NULL;
    }
    *colon = (size_t)(c - cred);
    return cred;
}

/* C_OK with req->user set, or C_ERR with the 401 in req. */
static int httpAuthenticate(httpRequest *req) {
    size_t nlen = 0;
    sds cred = httpBasicCredentials(req->conn, &nlen);
    int rc = C_ERR;
    if (cred == NULL) {
        /* No credentials: the connection is default's, as a new RESP one. */
        if (aclUserOpensWithoutAuth(DefaultUser)) {
            req->user = DefaultUser;
            rc = C_OK;
        } else {
            replyError(req, MHD_HTTP_UNAUTHORIZED,
                       "NOAUTH Authentication required: HTTP Basic, user 'default' for requirepass");
            req->challenge = 1;
        }
    } else {
        const char *pass = cred + nlen + 1;
        req->user = aclCheckPassword(cred, nlen, pass, sdslen(cred) - nlen - 1);
        if (req->user) {
            rc = C_OK;
        } else {
            sds name = sdsnewlen(cred, nlen);
            sds cinfo = httpClientInfo(req, name);
            aclLogDenialFrom(ACL_DENIED_AUTH, "http", 4, name, nlen, cinfo);
            sdsfree(cinfo);
            /* Quoted and escaped (sdscatrepr): the name is whatever the
             * peer sent, and a newline in it would forge a log line. */
            sds shown = sdscatrepr(sdsempty(), name, nlen > 64 ? 64 : nlen);
            serverLog(LL_VERBOSE, "HTTP: authentication failed for user %s", shown);
            sdsfree(shown);
            sdsfree(name);
            replyError(req, MHD_HTTP_UNAUTHORIZED,
                       "WRONGPASS invalid username-password pair or user is disabled.");
            req->challenge = 1;
        }
    }
    sdsfree(cred);
    return rc;
}

/* 403 and an ACL LOG entry, as a refused command or key. */
static void httpDeny(httpRequest *req, int reason, const char *object, size_t len, const char *msg) {
    sds cinfo = httpClientInfo(req, req->user->name);
    aclLogDenialFrom(reason, object, len, req->user->name, sdslen(req->user->name), cinfo);
    sdsfree(cinfo);
    replyError(req, MHD_HTTP_FORBIDDEN, msg);
}

/* ---- routes ------------------------------------------------------------------ */

/* Upstream's roles: a node that serves its keys (one node, or a cluster
 * primary for its slots) is the leader, serving unless the cluster is down
 * (then 503, the same body, so probes see the state); a cluster replica is
 * a standby -- "standby" while its link streams, "catching_up" before --
 * not ready for writes, with its primary as leader_address, as upstream's
 * standby masters answer. */
static void healthHandler(httpRequest *req) {
    char leader[128];
    int standby = replStandby(leader, sizeof(leader));
    int ok = server.cluster == NULL || server.cluster->state_ok;
    int ready = ok && !standby;
    const char *state = !ok ? "cluster_down" : standby == 1 ? "standby" : standby ? "catching_up" : "serving";
    json_t *j = json_pack("{s:s,s:s,s:s,s:b,s:s}", "status", "ok", "role", standby ? "standby" : "leader", "ha_state",
                          state, "service_ready", ready, "mode", server.cluster ? "cluster" : "standalone");
    if (j && standby) json_object_set_new(j, "leader_address", json_string(leader));
    replyJson(req, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, j);
}

/* Every segment the user sees in SEGMENTS, pool included (it holds values:
 * an engine waiting for a non-empty list waits for somewhere to put them),
 * one name a line. */
static void getAllSegmentsHandler(httpRequest *req) {
    sds body = sdsempty();
    for (uint32_t i = 0; i < segtabLen; i++) {
        segment *s = segtab[i];
        if (s == NULL || !aclUserSeesSegment(req->user, s)) continue;
        body = sdscat(body, s->name);
        body = sdscatlen(body, "\n", 1);
    }
    reply(req, MHD_HTTP_OK, CT_TEXT, body);
}

/* The transport a reader of the segment would use, upstream-style: the
 * protocol and "host:port" (a path for unix) of its first rdma://, else
 * tcp://, else unix:// endpoint. A segment mounted without ENDPOINT has
 * none: protocol "" and its HOST. */
static void replicaTransport(const segment *s, const char **proto, const char **where, size_t *wlen) {
    static const char *const order[] = {"rdma", "tcp", "unix"};
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        size_t plen = strlen(order[k]);
        for (int i = 0; i < s->nendpoints; i++) {
            const char *ep = s->endpoints[i];
            if (!strncmp(ep, order[k], plen) && !strncmp(ep + plen, "://", 3)) {
                *proto = order[k];
                *where = ep + plen + 3;
                *wlen = strlen(*where);
                return;
            }
        }
    }
    *proto = "";
    *where = s->host ? s->host : "";
    *wlen = strlen(*where);
}

static json_t *replicaJson(storeObj *o, int i) {
    storeReplica *r = storeObjReplica(o, i);
    segment *s = storeReplicaSegment(r);
    const char *proto, *where;
    size_t wlen;
    replicaTransport(s, &proto, &where, &wlen);
    json_t *j = json_object();
    json_object_set_new(j, "size_", json_integer((json_int_t)o->len));
    /* base: the address RDMA readers add offsets to (0 for the pool and
     * for segments mounted without BASE: then it is the offset). */
    json_object_set_new(j, "buffer_address_", json_integer((json_int_t)(s->base + r->offset)));
    json_object_set_new(j, "protocol_", json_string(proto));
    json_object_set_new(j, "transport_endpoint_", jsonBytes(where, wlen));
    json_object_set_new(j, "segment_name_", jsonBytes(s->name, strlen(s->name)));
    return j;
}

/* In a cluster a key belongs to its slot's node. A key that is here is
 * answered here (a slot being migrated or imported holds some); one that
 * is not, in a slot this node does not serve, is 404 OBJECT_NOT_FOUND --
 * true of this node -- naming the node to ask, as MOVED/ASK would (its RESP
 * address: nodes do not publish their http-port). 1: replied. */
static int clusterElsewhere(httpRequest *req, sds key) {
    clusterState *cs = server.cluster;
    if (cs == NULL) return 0;
    int slot = (int)keyHashSlot(key, sdslen(key));
    if (cs->slot_local[slot] || storeLookupWrite(key) || storePendingLookup(key)) return 0;
    clusterNode *n = cs->slots[slot];
    if (n == cs->myself && cs->migrating_to[slot]) n = cs->migrating_to[slot];
    if (n == NULL || !cs->state_ok) {
        replyJson(req, MHD_HTTP_SERVICE_UNAVAILABLE,
                  json_pack("{s:b,s:i,s:s,s:i}", "success", 0, "error_code", ERRC_UNAVAILABLE_IN_CURRENT_MODE,
                            "error_message", n ? "CLUSTERDOWN The cluster is down" : "CLUSTERDOWN Hash slot not served",
                            "slot", slot));
        return 1;
    }
    if (n == cs->myself) return 0;
    char addr[NET_ADDR_STR_LEN];
    anetFormatAddr(addr, sizeof(addr), n->ip, n->port);
    replyJson(req, MHD_HTTP_NOT_FOUND,
              json_pack("{s:b,s:i,s:s,s:i,s:s}", "success", 0, "error_code", ERRC_OBJECT_NOT_FOUND, "error_message",
                        "OBJECT_NOT_FOUND", "slot", slot, "node", addr));
    return 1;
}

/* /query_key?key=K: the memory replicas of K's complete version, as
 * upstream's QueryKey lists its buffer descriptors. A look, not a read: no
 * lease is granted and the LRU clock is left alone (OBJECT.INFO's lookup),
 * so the addresses are a snapshot; readers use GET.REPLICAS. */
static void queryKeyHandler(httpRequest *req) {
    const char *val = NULL;
    size_t vlen = 0;
    if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, "key", 3, &val, &vlen) != MHD_YES ||
        val == NULL) {
        replyJson(req, MHD_HTTP_BAD_REQUEST,
                  json_pack("{s:b,s:i,s:s,s:s}", "success", 0, "error_code", ERRC_INVALID_PARAMS, "error_message",
                            "INVALID_PARAMS", "error", "the query parameter 'key' is missing"));
        return;
    }
    if (!aclUserCanAccessKey(req->user, val, vlen, ACL_READ)) {
        httpDeny(req, ACL_DENIED_KEY, val, vlen, "NOPERM No permissions to access a key");
        return;
    }
    sds key = sdsnewlen(val, vlen);
    if (clusterElsewhere(req, key)) goto done;
    storeObj *o = storeLookupWrite(key);
    if (o == NULL) {
        storeObj *p = storePendingLookup(key);
        if (p && storeObjLiveReplicas(p) > 0)
            replyCodedError(req, MHD_HTTP_NOT_FOUND, ERRC_REPLICA_IS_NOT_READY, "REPLICA_IS_NOT_READY");
        else
            replyCodedError(req, MHD_HTTP_NOT_FOUND, ERRC_OBJECT_NOT_FOUND, "OBJECT_NOT_FOUND");
        goto done;
    }
    json_t *data = json_array();
    for (int i = 0; i < o->nreplicas; i++) {
        segment *s = storeReplicaSegment(storeObjReplica(o, i));
        if (s == NULL || s->tier == SEG_TIER_DISK) continue; /* stale, or not memory */
        json_array_append_new(data, replicaJson(o, i));
    }
    replyJson(req, MHD_HTTP_OK, json_pack("{s:b,s:o}", "success", 1, "data", data));
done:
    sdsfree(key);
}

static httpRoute *lookupRoute(const char *path) {
    for (httpRoute *r = httpRoutes; r->path; r++)
        if (!strcmp(r->path, path)) return r;
    return NULL;
}

/* A complete request without a body: who asks, which path, may they. */
static void httpDispatch(httpRequest *req) {
    if (httpProtectedRefusal(req) || httpAuthenticate(req) != C_OK) goto rejected;
    httpRoute *route = lookupRoute(req->path);
    if (route == NULL) {
        replyError(req, MHD_HTTP_NOT_FOUND, "no such path: /health, /get_all_segments, /query_key?key=K");
        goto rejected;
    }
    if (strcmp(req->method, MHD_HTTP_METHOD_GET) && strcmp(req->method, MHD_HTTP_METHOD_HEAD)) {
        replyError(req, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are served");
        req->allow = 1;
        goto rejected;
    }
    if (!aclUserCanRun(req->user, route->cmd)) {
        sds msg = sdscatprintf(sdsempty(), "NOPERM User %s has no permissions to run the '%s' command",
                               req->user->name, route->cmd->fullname);
        httpDeny(req, ACL_DENIED_CMD, route->cmd->fullname, sdslen(route->cmd->fullname), msg);
        sdsfree(msg);
        goto rejected;
    }
    route->proc(req);
    return;
rejected:
    server.stat_http_rejected++;
}

/* MHD_get_connection_values' callback: counts a Content-Length that is
 * not all zeros. */
static enum MHD_Result countBodyLength(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) && (value == NULL || strspn(value, "0") != strlen(value)))
        (*(int *)cls)++;
    return MHD_YES;
}

/* Whether the headers announce a body (a Content-Length above 0, or any
 * Transfer-Encoding: HTTP/1.1 frames a body no other way). Every
 * Content-Length is looked at, not the first: the library frames the
 * request by the first, so "Content-Length: 0" then "Content-Length: 6"
 * was answered 200 and the six bytes after it read as the next request
 * -- one a proxy that frames by the last would have passed on as a body. */
static int requestHasBody(struct MHD_Connection *conn) {
    if (MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING)) return 1;
    int lengths = 0;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, countBodyLength, &lengths);
    return lengths > 0;
}

/* The addresses of these mark where a request stands in *req_cls. The
 * library hands the access handler a decoded path without its length, so
 * "/health%00x" would arrive as "/health": the raw URI is looked at first
 * (httpRawUri) and a path with an encoded zero byte is refused. */
static int path_has_nul, headers_seen, headers_seen_nul;

static void *httpRawUri(void *cls, const char *uri, struct MHD_Connection *conn) {
    (void)cls;
    (void)conn;
    size_t pathlen = strcspn(uri, "?");
    for (size_t i = 0; i + 2 < pathlen; i++)
        if (uri[i] == '%' && uri[i + 1] == '0' && uri[i + 2] == '0') return &path_has_nul;
    return NULL;
}

/* The library calls this once the headers are in (*req_cls NULL or
 * &path_has_nul), then again when the request is complete. Answering at
 * the first call would close the connection after the reply (the library
 * cannot tell where an unread body ends), so a request without a body is
 * answered at the second, keeping the connection; one with a body at the
 * first, unread. */
static enum MHD_Result httpAccess(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls) {
    (void)cls;
    (void)version;
    (void)upload_data;
    httpRequest req = {conn, method, url, NULL, MHD_HTTP_OK, CT_JSON, NULL, 0, 0};
    if (*req_cls == NULL || *req_cls == &path_has_nul) {
        *req_cls = *req_cls ? &headers_seen_nul : &headers_seen;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (ci && ci->socket_context) ((httpConn *)ci->socket_context)->since = 0; /* headers in */
        if (!requestHasBody(conn)) return MHD_YES;
        server.stat_http_requests++;
        server.stat_http_rejected++;
        replyError(&req, MHD_HTTP_CONTENT_TOO_LARGE, "no path takes a request body");
        return httpSend(&req);
    }
    if (*upload_data_size != 0) return MHD_NO; /* a body nothing announced: close */
    server.stat_http_requests++;
    if (*req_cls == &headers_seen_nul) {
        server.stat_http_rejected++;
        replyError(&req, MHD_HTTP_BAD_REQUEST, "the path holds a zero byte (%00)");
        return httpSend(&req);
    }
    httpDispatch(&req);
    return httpSend(&req);
}

/* ---- the daemon in the event loop ---------------------------------------------- */

static void httpNotifyConnection(void *cls, struct MHD_Connection *conn, void **socket_context,
                                 enum MHD_ConnectionNotificationCode toe) {
    (void)cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        http.connected++;
        server.stat_http_connections++;
        httpConn *hc = zcalloc(sizeof(*hc));
        hc->conn = conn;
        hc->since = monoMs();
        hc->next = httpConns;
        if (httpConns) httpConns->prev = hc;
        httpConns = hc;
        *socket_context = hc;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        http.connected--;
        http.closed++;
        httpConn *hc = *socket_context;
        if (hc == NULL) return;
        if (hc->prev) hc->prev->next = hc->next;
        else httpConns = hc->next;
        if (hc->next) hc->next->prev = hc->prev;
        zfree(hc);
        *socket_context = NULL;
    }
}

/* A request answered (or given up): the next one's headers are waited for
 * from now. */
static void httpRequestDone(void *cls, struct MHD_Connection *conn, void **req_cls,
                            enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)req_cls;
    (void)toe;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context) ((httpConn *)ci->socket_context)->since = monoMs();
}

/* Connections that have waited more than http-timeout for a request's
 * headers: their sockets are shut down, which the library reads as the
 * peer gone and closes (it has no call to close one itself). */
static void httpReapSlow(void) {
    static long long last;
    long long now = monoMs(), limit = http.timeout * 1000;
    if (now - last < HTTP_TICK_MS) return; /* a walk a tick is enough */
    last = now;
    for (httpConn *hc = httpConns; hc; hc = hc->next) {
        if (hc->since == 0 || now - hc->since <= limit) continue;
        hc->since = 0;
        int fd = connFd(hc->conn);
        if (fd == -1) continue;
        serverLog(LL_VERBOSE, "HTTP: closing a connection whose request took more than %llds", http.timeout);
        shutdown(fd, SHUT_RDWR);
    }
}

/* The library's own complaints (a refused connection, a malformed
 * request): one verbose log line each. */
static void httpLogger(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[LOG_MAX_LEN];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t len = strlen(msg);
    while (len && (msg[len - 1] == '\n' || msg[len - 1] == '\r')) msg[--len] = '\0';
    serverLog(LL_VERBOSE, "HTTP: %s", msg);
}

/* At the connection limit the library takes its listening socket out of
 * its epoll set, and puts it back at the start of its next run: when a run
 * closed connections, one more run accepts what waits in the backlog. */
static void httpRun(void) {
    /* Here, not in the timer only: a busy HTTP port re-arms the timer on
     * every event, and tricklers are what keeps it busy. */
    httpReapSlow();
    for (int i = 0; i < 3 && http.daemon; i++) {
        long long closed = http.closed;
        MHD_run(http.daemon);
        if (http.closed == closed) break;
    }
}

static long long httpNextRunMs(void) {
    MHD_UNSIGNED_LONG_LONG ms;
    if (http.daemon && MHD_get_timeout(http.daemon, &ms) == MHD_YES && ms < HTTP_TICK_MS) return (long long)ms;
    return HTTP_TICK_MS;
}

static int httpTimerProc(aeEventLoop *el, long long id, void *data) {
    (void)el;
    (void)data;
    if (http.daemon == NULL || id != http.timer) return AE_NOMORE;
    httpRun();
    return (int)httpNextRunMs();
}

static void httpArmTimer(void) {
    if (http.timer != -1) aeDeleteTimeEvent(server.el, http.timer);
    http.timer = aeCreateTimeEvent(server.el, httpNextRunMs(), httpTimerProc, NULL, NULL);
}

static void httpReadable(aeEventLoop *el, int fd, void *privdata, int mask) {
    (void)el;
    (void)fd;
    (void)privdata;
    (void)mask;
    httpRun();
    httpArmTimer(); /* a new connection may time out sooner than the timer fires */
}

/* The file event goes before the daemon: MHD_stop_daemon closes the epoll
 * fd, and ae must not be left watching a number that may be reused. */
static void httpStop(void) {
    if (http.daemon == NULL) return;
    aeDeleteFileEvent(server.el, http.epfd, AE_READABLE);
    if (http.timer != -1) aeDeleteTimeEvent(server.el, http.timer);
    http.timer = -1;
    MHD_stop_daemon(http.daemon); /* closes its connections (counted closed) and listenfd */
    http.daemon = NULL;
    http.listenfd = http.epfd = -1;
    http.port = 0;
    http.connected = 0;
}

static int sameAddress(void) {
    return http.daemon && http.port == server.http_port && http.bind && server.http_bind &&
           !strcmp(http.bind, server.http_bind);
}

/* Listens as configured, replacing the running daemon only once the new
 * one runs. C_ERR with err set (and the old daemon untouched). */
static int httpStart(char *err, size_t errlen) {
    if (server.http_port == 0) {
        httpStop();
        return C_OK;
    }
    if (sameAddress() && http.maxclients == server.http_maxclients && http.timeout == server.http_timeout &&
        http.maxreq == server.http_max_request_size)
        return C_OK;
    if (server.http_bind == NULL || server.http_bind[0] == '\0') {
        snprintf(err, errlen, "http-bind must name an address (\"*\" for every IPv4 one)");
        return C_ERR;
    }
    for (httpRoute *r = httpRoutes; r->path; r++)
        if (r->cmd == NULL) serverAssert((r->cmd = lookupCommandByName(r->permission)) != NULL);
    int fd;
    if (sameAddress()) {
        fd = dup(http.listenfd);
        if (fd == -1) {
            snprintf(err, errlen, "dup of the HTTP listening socket: %s", strerror(errno));
            return C_ERR;
        }
        anetCloexec(fd);
    } else {
        char aerr[ANET_ERR_LEN] = "";
        fd = anetTcpServer(aerr, (int)server.http_port, server.http_bind, server.tcp_backlog);
        if (fd == ANET_ERR) {
            snprintf(err, errlen, "cannot listen for HTTP on %s:%lld: %s", server.http_bind, server.http_port, aerr);
            return C_ERR;
        }
    }
    anetNonBlock(NULL, fd);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, httpAccess, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, httpLogger, NULL, /* first, or the options' complaints go to stderr */
        MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)server.http_maxclients,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)server.http_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)server.http_max_request_size,
        MHD_OPTION_NOTIFY_CONNECTION, httpNotifyConnection, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, httpRequestDone, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, httpRawUri, NULL,
        MHD_OPTION_END);
    const union MHD_DaemonInfo *info = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    if (info == NULL || aeCreateFileEvent(server.el, info->epoll_fd, AE_READABLE, httpReadable, NULL) == AE_ERR) {
        snprintf(err, errlen, "cannot start the HTTP daemon on %s:%lld (see the log)", server.http_bind,
                 server.http_port);
        if (d) MHD_stop_daemon(d); /* closes fd */
        else close(fd);
        return C_ERR;
    }
    httpStop();
    http.daemon = d;
    http.listenfd = fd;
    http.epfd = info->epoll_fd;
    http.port = (int)server.http_port;
    sdsfree(http.bind);
    http.bind = sdsnew(server.http_bind);
    http.maxclients = server.http_maxclients;
    http.timeout = server.http_timeout;
    http.maxreq = server.http_max_request_size;
    httpArmTimer();
    serverLog(LL_NOTICE, "HTTP endpoints on http://%s:%d/ (/health, /get_all_segments, /query_key)", http.bind,
              http.port);
    return C_OK;
}

/* ---- interface ---------------------------------------------------------------- */

int httpListenFd(void) { return http.daemon ? http.listenfd : -1; }

int httpInit(char *err, size_t errlen) { return httpStart(err, errlen); }

int httpApplyConfig(const char **err) {
    static char msg[ANET_ERR_LEN + 128];
    if (server.el == NULL) return C_OK; /* start-up: httpInit listens */
    int was = http.port;
    if (httpStart(msg, sizeof(msg)) != C_OK) {
        serverLog(LL_WARNING, "CONFIG SET refused: %s", msg);
        *err = msg;
        return C_ERR;
    }
    if (was && http.port == 0) serverLog(LL_NOTICE, "HTTP endpoints off (http-port 0)");
    return C_OK;
}

void httpShutdown(void) { httpStop(); }

int httpListeningPort(void) { return http.daemon ? http.port : 0; }

long long httpConnectedClients(void) { return http.connected; }
