/* client.c -- what a connection says about itself and asks of the others:
 * CLIENT (LIST, INFO, KILL, SETNAME, ID, REPLY, NO-EVICT, ...), AUTH and
 * HELLO.
 *
 * networking.c moves a client's bytes; this file only reads and changes a
 * client's identity and flags, so it never touches the query buffer or the
 * reply chain, and a client it kills is only marked (freeClientAsync): the
 * event loop frees it when no command can hold a pointer to it any more.
 *
 * What one client may see of another follows the ACL (acl.c): a tenant's
 * CLIENT LIST and CLIENT KILL reach the connections of its own user only,
 * so the addresses and names of other tenants' clients never leave the
 * server. CLIENT LIST walks every client, as Redis's does: it is an
 * operator's command, not one a request path issues.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "acl.h"
#include "pubsub.h"
#include "relay.h"
#include "replication.h"
#include "server.h"
#include "store.h"
#include "util.h"

/* ---- client introspection ------------------------------------------------ */

sds catClientInfoString(sds s, client *c) {
    char flags[16], *p = flags;
    if (replClientIsReplica(c)) *p++ = 'S'; /* a replica's link, as Redis shows it */
    if (c->flags & CLIENT_MONITOR) *p++ = 'O';
    if (c->flags & CLIENT_MULTI) *p++ = 'x';
    if (c->flags & CLIENT_BLOCKED) *p++ = 'b';
    if (c->flags & CLIENT_DIRTY_CAS) *p++ = 'd';
    if (c->flags & CLIENT_PUBSUB) *p++ = 'P';
    if (c->flags & CLIENT_CLOSE_AFTER_REPLY) *p++ = 'c';
    if (c->flags & CLIENT_UNIX_SOCKET) *p++ = 'U';
    if (c->flags & CLIENT_CLOSE_ASAP) *p++ = 'A';
    if (c->flags & CLIENT_NO_EVICT) *p++ = 'e';
    if (c->flags & CLIENT_NO_TOUCH) *p++ = 'T';
    if (p == flags) *p++ = 'N';
    *p = '\0';
    int ev = c->fd == -1 ? 0 : aeGetFileEvents(server.el, c->fd);
    char events[3], *e = events;
    if (ev & AE_READABLE) *e++ = 'r';
    if (ev & AE_WRITABLE) *e++ = 'w';
    *e = '\0';
    mstime_t now = monoMs();
    size_t obl = c->bufpos, oll = 0;
    for (replyBlock *b = c->reply_head; b; b = b->next) oll++;
    size_t qbuf = sdslen(c->querybuf) - c->qb_pos; /* not parsed yet */
    long long sub, psub, ssub;
    pubsubClientCounts(c, &sub, &psub, &ssub);
    return sdscatprintf(s,
        "id=%llu addr=%s laddr=%s fd=%d name=%s age=%lld idle=%lld flags=%s db=0 sub=%lld psub=%lld "
        "ssub=%lld multi=%d qbuf=%zu qbuf-free=%zu argv-mem=%zu multi-mem=%zu rbs=%zu rbp=%zu "
        "obl=%zu oll=%zu omem=%zu tot-mem=%zu events=%s cmd=%s user=%s redir=-1 resp=%d "
        "pending-puts=%llu pending-put-bytes=%llu",
        (unsigned long long)c->id, c->addr, c->laddr, c->fd, c->name ? c->name : "",
        (long long)(now - c->ctime) / 1000, (long long)(now - c->lastinteraction) / 1000, flags,
        sub, psub, ssub, (c->flags & CLIENT_MULTI) ? c->mstate.count : -1, qbuf, sdsavail(c->querybuf),
        c->argv_bytes, c->mstate.bytes, c->buf ? (size_t)PROTO_REPLY_CHUNK : 0, c->buf_peak, obl, oll,
        c->reply_bytes, clientMemoryUsage(c), events, c->lastcmd ? c->lastcmd->fullname : "NULL", c->user->name,
        c->resp, (unsigned long long)(c->put_owner ? c->put_owner->npending : 0),
        (unsigned long long)(c->put_owner ? c->put_owner->pending_bytes : 0));
}

/* What a client costs: its struct, buffers, argv, queued transaction and replies. */
size_t clientMemoryUsage(client *c) {
    return sizeof(client) + (c->buf ? PROTO_REPLY_CHUNK : 0) + sdsAllocSize(c->querybuf) + c->argv_bytes +
           c->mstate.bytes + c->reply_bytes + relayClientMemory(c);
}

/* The classes CLIENT LIST/KILL TYPE name, as Redis: a replica's link
 * (replication.c) is replica, a subscribed client pubsub, every other one
 * normal (a replica's link to its primary is no client here, so master
 * matches nobody). */
enum { CLIENT_TYPE_NORMAL, CLIENT_TYPE_REPLICA, CLIENT_TYPE_PUBSUB, CLIENT_TYPE_MASTER };

static int clientTypeByName(const char *name) {
    if (!strcasecmp(name, "normal")) return CLIENT_TYPE_NORMAL;
    if (!strcasecmp(name, "replica") || !strcasecmp(name, "slave")) return CLIENT_TYPE_REPLICA;
    if (!strcasecmp(name, "pubsub")) return CLIENT_TYPE_PUBSUB;
    if (!strcasecmp(name, "master")) return CLIENT_TYPE_MASTER;
    return -1;
}

static int clientType(client *c) {
    if (replClientIsReplica(c)) return CLIENT_TYPE_REPLICA;
    return (c->flags & CLIENT_PUBSUB) ? CLIENT_TYPE_PUBSUB : CLIENT_TYPE_NORMAL;
}

/* type -1: every client. */
/* The clients viewer may see (a tenant: its own user's, acl.c). */
static sds getAllClientsInfoString(int type, const user *viewer) {
    sds s = sdsempty();
    for (client *c = server.clients_head; c; c = c->next) {
        if (type != -1 && clientType(c) != type) continue;
        if (!aclUserSeesClient(viewer, c)) continue;
        s = catClientInfoString(s, c);
        s = sdscatlen(s, "\n", 1);
    }
    return s;
}

/* Client names are shown in CLIENT LIST lines, so no spaces or newlines. */
static int validClientName(sds name) {
    for (size_t j = 0; j < sdslen(name); j++)
        if (name[j] < '!' || name[j] > '~') return 0;
    return 1;
}

static int clientSetName(client *c, sds name) {
    if (!validClientName(name)) {
        addReplyError(c, "ERR Client names cannot contain spaces, newlines or special characters.");
        return C_ERR;
    }
    sdsfree(c->name);
    c->name = sdslen(name) ? sdsdup(name) : NULL;
    return C_OK;
}

/* Connections by id: CLIENT LIST ID and the end of a GRACEFUL drain find
 * one in O(1). A walk of every connection was O(clients) per id asked --
 * per segment whose drain ended, in the cron (DEBUG VISITS clients-by-id). */
static dictType clientIdType = {dictIntHash, dictIntEqual, NULL, NULL};

void clientIndexAdd(client *c) {
    if (server.clients_by_id == NULL) server.clients_by_id = dictCreate(&clientIdType);
    dictAdd(server.clients_by_id, (void *)(uintptr_t)c->id, c);
}

void clientIndexRemove(client *c) {
    if (server.clients_by_id) dictDelete(server.clients_by_id, (void *)(uintptr_t)c->id);
}

client *lookupClientByID(uint64_t id) {
    serverVisit(VISITS_CLIENTS, 1);
    return server.clients_by_id ? dictFetchValue(server.clients_by_id, (void *)(uintptr_t)id) : NULL;
}

static void clientKill(client *c) {
    long long killed = 0;
    int skipme = 1, type = -1;
    uint64_t id = 0;
    const char *addr = NULL, *laddr = NULL;
    sds username = NULL;
    if (c->argc == 3) {
        /* Old form: CLIENT KILL addr:port, replies +OK or an error. */
        for (client *t = server.clients_head; t; t = t->next) {
            if (!strcmp(t->addr, c->argv[2]) && aclUserSeesClient(c->user, t)) {
                if (t == c) c->flags |= CLIENT_CLOSE_AFTER_REPLY;
                else freeClientAsync(t);
                addReplyOk(c);
                return;
            }
        }
        addReplyError(c, "ERR No such client");
        return;
    }
    /* Pairs read in order, as Redis: a bad pair before a last option that
     * lacks its value gets its own error, not the syntax error. */
    for (int i = 2; i < c->argc; i += 2) {
        if (i + 1 >= c->argc) {
            addReplyErrorSyntax(c);
            return;
        }
        sds opt = c->argv[i], val = c->argv[i + 1];
        if (!strcasecmp(opt, "id")) {
            long long v;
            if (!string2ll(val, sdslen(val), &v) || v <= 0) {
                addReplyError(c, "ERR client-id should be greater than 0");
                return;
            }
            id = (uint64_t)v;
        } else if (!strcasecmp(opt, "addr")) {
            addr = val;
        } else if (!strcasecmp(opt, "laddr")) {
            laddr = val;
        } else if (!strcasecmp(opt, "type")) {
            type = clientTypeByName(val);
            if (type == -1) {
                addReplyErrorFormat(c, "ERR Unknown client type '%s'", val);
                return;
            }
        } else if (!strcasecmp(opt, "user")) {
            if (!aclUserExists(val) || !aclUserSeesUser(c->user, val, sdslen(val))) {
                addReplyErrorFormat(c, "ERR No such user '%s'", val);
                return;
            }
            username = val;
        } else if (!strcasecmp(opt, "skipme")) {
            if (!strcasecmp(val, "yes")) skipme = 1;
            else if (!strcasecmp(val, "no")) skipme = 0;
            else {
                addReplyErrorSyntax(c);
                return;
            }
        } else {
            addReplyErrorSyntax(c);
            return;
        }
    }
    for (client *t = server.clients_head; t; t = t->next) {
        if (!aclUserSeesClient(c->user, t)) continue; /* a tenant's reach: its own user's */
        if (id && t->id != id) continue;
        if (addr && strcmp(t->addr, addr)) continue;
        if (laddr && strcmp(t->laddr, laddr)) continue;
        if (type != -1 && clientType(t) != type) continue;
        if (username && (sdslen(t->user->name) != sdslen(username) ||
                         memcmp(t->user->name, username, sdslen(username))))
            continue;
        if (t == c && skipme) continue;
        if (t == c) c->flags |= CLIENT_CLOSE_AFTER_REPLY;
        else freeClientAsync(t);
        killed++;
    }
    addReplyLongLong(c, killed);
}

void clientCommand(client *c) {
    const char *sub = c->argv[1];
    if (c->argc == 2 && !strcasecmp(sub, "help")) {
        static const char *help[] = {
            "GETNAME", "    Return the name of the current connection.",
            "ID", "    Return the ID of the current connection.",
            "INFO", "    Return information about the current client connection.",
            "KILL <ip:port>", "    Kill connection made from <ip:port>.",
            "KILL <option> <value> [<option> <value> [...]]",
            "    Kill connections. Options are: ID <id>, ADDR <ip:port>, LADDR <ip:port>,",
            "    TYPE (NORMAL|PUBSUB), USER <username>, SKIPME (YES|NO).",
            "LIST [TYPE (NORMAL|PUBSUB)] [ID <id> [<id> ...]]", "    Return information about client connections.",
            "SETNAME <name>", "    Assign the name <name> to the current connection.",
            "REPLY (ON|OFF|SKIP)", "    Control the replies sent to the current connection.",
            "SETINFO <LIB-NAME|LIB-VER> <value>", "    Accepted for client compatibility.",
            "NO-TOUCH (ON|OFF)", "    Reads of this connection do not change the LRU of the keys they read.",
            "NO-EVICT (ON|OFF)", "    Protect this connection from client eviction (none is done yet).",
            "PAUSE <timeout> [WRITE|ALL]",
            "    Suspend all, or just write, clients for <timeout> milliseconds.",
            "UNPAUSE", "    Stop the current client pause, resuming traffic.",
            "GETREDIR | TRACKINGINFO", "    Tracking state: always off (CLIENT TRACKING is not served).",
            NULL};
        addReplyHelp(c, help);
    } else if (c->argc == 2 && !strcasecmp(sub, "id")) {
        addReplyLongLong(c, (long long)c->id);
    } else if (c->argc == 2 && !strcasecmp(sub, "info")) {
        sds s = catClientInfoString(sdsempty(), c);
        s = sdscatlen(s, "\n", 1);
        addReplyVerbatim(c, s, sdslen(s), "txt");
        sdsfree(s);
    } else if (!strcasecmp(sub, "list")) {
        sds s;
        if (c->argc == 2) {
            s = getAllClientsInfoString(-1, c->user);
        } else if (c->argc == 4 && !strcasecmp(c->argv[2], "type")) {
            int type = clientTypeByName(c->argv[3]);
            if (type == -1) {
                addReplyErrorFormat(c, "ERR Unknown client type '%s'", c->argv[3]);
                return;
            }
            s = getAllClientsInfoString(type, c->user);
        } else if (c->argc > 3 && !strcasecmp(c->argv[2], "id")) {
            s = sdsempty();
            for (int j = 3; j < c->argc; j++) {
                long long id;
                if (!string2ll(c->argv[j], sdslen(c->argv[j]), &id)) {
                    sdsfree(s);
                    addReplyError(c, "ERR Invalid client ID");
                    return;
                }
                /* 0 or below names no client: listed as nothing, as Redis
                 * 7.0 does, not refused. */
                client *t = id > 0 ? lookupClientByID((uint64_t)id) : NULL;
                if (t && aclUserSeesClient(c->user, t)) {
                    s = catClientInfoString(s, t);
                    s = sdscatlen(s, "\n", 1);
                }
            }
        } else {
            addReplyErrorSyntax(c);
            return;
        }
        addReplyVerbatim(c, s, sdslen(s), "txt");
        sdsfree(s);
    } else if (c->argc == 3 && !strcasecmp(sub, "setname")) {
        if (clientSetName(c, c->argv[2]) == C_OK) addReplyOk(c);
    } else if (c->argc == 2 && !strcasecmp(sub, "getname")) {
        addReplyBulkCString(c, c->name);
    } else if (!strcasecmp(sub, "kill") && c->argc >= 3) {
        clientKill(c);
    } else if (c->argc == 3 && (!strcasecmp(sub, "no-touch") || !strcasecmp(sub, "no-evict"))) {
        int flag = !strcasecmp(sub, "no-touch") ? CLIENT_NO_TOUCH : CLIENT_NO_EVICT;
        if (!strcasecmp(c->argv[2], "on")) c->flags |= flag;
        else if (!strcasecmp(c->argv[2], "off")) c->flags &= ~flag;
        else {
            addReplyErrorSyntax(c);
            return;
        }
        addReplyOk(c);
    } else if (c->argc == 3 && !strcasecmp(sub, "reply")) {
        /* OFF and SKIP are not answered: their own reply would be the
         * first one dropped. */
        const char *mode = c->argv[2];
        if (!strcasecmp(mode, "on")) {
            c->flags &= ~(CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP);
            addReplyOk(c);
        } else if (!strcasecmp(mode, "off")) {
            c->flags |= CLIENT_REPLY_OFF;
        } else if (!strcasecmp(mode, "skip")) {
            if (!(c->flags & CLIENT_REPLY_OFF)) c->flags |= CLIENT_REPLY_SKIP_NEXT;
        } else {
            addReplyErrorSyntax(c);
        }
    } else if ((c->argc == 3 || c->argc == 4) && !strcasecmp(sub, "pause")) {
        long long ms;
        if (!string2ll(c->argv[2], sdslen(c->argv[2]), &ms)) {
            addReplyError(c, "ERR timeout is not an integer or out of range");
            return;
        }
        if (ms < 0) {
            addReplyError(c, "ERR timeout is negative");
            return;
        }
        long long now = monoMs();
        if (ms > LLONG_MAX - now) {
            addReplyError(c, "ERR timeout is out of range");
            return;
        }
        int type = PAUSE_ALL;
        if (c->argc == 4) {
            if (!strcasecmp(c->argv[3], "write")) type = PAUSE_WRITE;
            else if (strcasecmp(c->argv[3], "all")) {
                addReplyError(c, "ERR CLIENT PAUSE mode must be WRITE or ALL");
                return;
            }
        }
        pauseClients(type, now + ms);
        addReplyOk(c);
    } else if (c->argc == 2 && !strcasecmp(sub, "getredir")) {
        /* Tracking is never on here (CLIENT TRACKING is not served): -1,
         * Redis's answer for a connection that does not track. */
        addReplyLongLong(c, -1);
    } else if (c->argc == 2 && !strcasecmp(sub, "trackinginfo")) {
        addReplyMapLen(c, 3);
        addReplyBulkCString(c, "flags");
        addReplySetLen(c, 1);
        addReplyBulkCString(c, "off");
        addReplyBulkCString(c, "redirect");
        addReplyLongLong(c, -1);
        addReplyBulkCString(c, "prefixes");
        addReplyArrayLen(c, 0);
    } else if (c->argc == 2 && !strcasecmp(sub, "unpause")) {
        unpauseClients();
        addReplyOk(c);
    } else if (c->argc == 4 && !strcasecmp(sub, "setinfo")) {
        if (strcasecmp(c->argv[2], "lib-name") && strcasecmp(c->argv[2], "lib-ver")) {
            addReplyErrorFormat(c, "ERR Unrecognized option '%s'", c->argv[2]);
            return;
        }
        addReplyOk(c);
    } else {
        addReplySubcommandSyntaxError(c);
    }
}

/* ---- authentication ------------------------------------------------------ */

/* AUTH and HELLO AUTH: the ACL (acl.c) checks the user and password and
 * logs a failure in ACL LOG. name NULL: the one-argument form, user default. */
static int checkAuth(client *c, sds user, sds pass) { return aclAuthenticate(c, user, pass); }

void authCommand(client *c) {
    if (c->argc > 3) {
        addReplyErrorSyntax(c);
        return;
    }
    if (c->argc == 2 && !aclDefaultUserHasPassword()) {
        addReplyError(c, "ERR AUTH <password> called without any password configured for the "
                         "default user. Are you sure your configuration is correct?");
        return;
    }
    sds user = c->argc == 3 ? c->argv[1] : NULL;
    sds pass = c->argv[c->argc - 1];
    int rc = checkAuth(c, user, pass);
    if (rc == C_OK) addReplyOk(c);
    else if (rc == ACL_AUTH_TOO_MANY) addReplyError(c, ACL_ERR_TENANT_MAXCLIENTS);
    else addReplyError(c, "-WRONGPASS invalid username-password pair or user is disabled.");
}

void helloCommand(client *c) {
    long long ver = 0;
    int next = 1;
    if (c->argc >= 2) {
        if (getLongLongFromObjectOrReply(c, c->argv[next++], &ver,
                                         "ERR Protocol version is not an integer or out of range") != C_OK)
            return;
        if (ver < 2 || ver > 3) {
            addReplyError(c, "-NOPROTO unsupported protocol version");
            return;
        }
    }
    sds setname = NULL;
    for (int j = next; j < c->argc; j++) {
        int moreargs = c->argc - 1 - j;
        if (!strcasecmp(c->argv[j], "AUTH") && moreargs >= 2) {
            int rc = checkAuth(c, c->argv[j + 1], c->argv[j + 2]);
            if (rc != C_OK) {
                addReplyError(c, rc == ACL_AUTH_TOO_MANY
                                     ? ACL_ERR_TENANT_MAXCLIENTS
                                     : "-WRONGPASS invalid username-password pair or user is disabled.");
                return;
            }
            j += 2;
        } else if (!strcasecmp(c->argv[j], "SETNAME") && moreargs >= 1) {
            setname = c->argv[++j];
        } else {
            addReplyErrorFormat(c, "ERR Syntax error in HELLO option '%s'", c->argv[j]);
            return;
        }
    }
    if (!c->authenticated) {
        addReplyError(c, "-NOAUTH HELLO must be called with the client already authenticated, "
                         "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                         "authenticate the client and select the RESP protocol version at the same time");
        return;
    }
    if (setname && clientSetName(c, setname) != C_OK) return;
    if (ver) c->resp = (int)ver;
    /* "version" is the Redis release whose protocol we follow, since that
     * is what clients compare (server.h says which); ours is in
     * "mooncake_version", last, where a client that knows us looks. */
    addReplyMapLen(c, 8);
    addReplyBulkCString(c, "server");
    addReplyBulkCString(c, "mooncake");
    addReplyBulkCString(c, "version");
    addReplyBulkCString(c, REDIS_COMPAT_VERSION);
    addReplyBulkCString(c, "proto");
    addReplyLongLong(c, c->resp);
    addReplyBulkCString(c, "id");
    addReplyLongLong(c, (long long)c->id);
    addReplyBulkCString(c, "mode");
    addReplyBulkCString(c, "standalone");
    addReplyBulkCString(c, "role");
    addReplyBulkCString(c, "master");
    addReplyBulkCString(c, "modules");
    addReplyArrayLen(c, 0);
    addReplyBulkCString(c, "mooncake_version");
    addReplyBulkCString(c, MOONCAKE_VERSION);
}
