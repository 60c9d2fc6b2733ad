/* acllog.c -- ACL LOG: the server's record of refused commands, keys,
 * channels and AUTHs (as Redis 7 keeps it).
 *
 * Why a file of its own: the log is a bounded list with its own state and
 * its own readers (ACL LOG, INFO's acl_access_denied_* counters), and the
 * checks in acl.c only ever append to it. Kept apart, acl.c stays the
 * rules and their checks, and this file the memory of what they refused.
 *
 * Shape. The last acllog-max-len refusals, newest first, in an array: the
 * same refusal repeated within a minute (same reason, context, object and
 * user, among the newest ACL_LOG_GROUP_SCAN entries) bumps a count and
 * moves to the front instead of adding an entry, as Redis does, so a
 * client retrying a refused command in a loop cannot push everything else
 * out. Every refusal is counted in INFO stats, logged or not.
 *
 * Tenants read and reset only their own user's entries (the others' name
 * their keys and connections), as in SLOWLOG; an entry made "server only"
 * (a data-plane refusal naming the key of the object found at an offset the
 * tenant gave) is not shown even to the tenant it refused: it would tell
 * the tenant that another's object sits there.
 */
#include "acllog.h"

#include <string.h>
#include <strings.h>

#include "acl.h"
#include "server.h"
#include "util.h"
#include "zmalloc.h"

/* ---- the ACL log ---------------------------------------------------------- */

enum { LOG_CTX_TOPLEVEL = 0, LOG_CTX_MULTI = 1 }; /* MULTI: refused when EXEC ran it */

typedef struct aclLogEntry {
    long long count;
    int reason;        /* ACL_DENIED_* */
    int context;
    sds object;        /* the command, the key, "AUTH" */
    sds username;
    mstime_t ctime;    /* last time it happened */
    mstime_t created;
    long long id;
    sds cinfo;         /* CLIENT LIST line of the client, when it last happened */
    int server_only;   /* not shown to its tenant: a data-plane refusal names another's key */
} aclLogEntry;

static aclLogEntry **aclLog; /* newest first */
static long long aclLogLen, aclLogNextId;

static void logEntryFree(aclLogEntry *e) {
    sdsfree(e->object);
    sdsfree(e->username);
    sdsfree(e->cinfo);
    zfree(e);
}

static void aclLogTrim(void) {
    while (aclLogLen > server.acllog_max_len) logEntryFree(aclLog[--aclLogLen]);
}

/* Which entries a user reads and resets: a tenant only its own user's (the
 * refusals of others name their keys and connections), as in SLOWLOG. */
static int logEntrySeen(const user *u, const aclLogEntry *e) {
    if (!aclUserRestricted(u)) return 1;
    return !e->server_only && aclUserSeesUser(u, e->username, sdslen(e->username));
}

static void aclLogReset(const user *u) {
    long long kept = 0;
    for (long long i = 0; i < aclLogLen; i++) {
        if (logEntrySeen(u, aclLog[i])) logEntryFree(aclLog[i]);
        else aclLog[kept++] = aclLog[i];
    }
    aclLogLen = kept;
}

#define ACL_LOG_GROUP_MS 60000
#define ACL_LOG_GROUP_SCAN 10

/* cinfo: the entry's client-info, taken over. server_only: an entry its
 * own tenant does not read (aclLogDenialServerOnly). */
static void aclLogAddEntry(int reason, int context, const char *object, size_t objlen, const char *username,
                           size_t ulen, sds cinfo, int server_only) {
    /* INFO stats counts every refusal, logged or not (as Redis 7). */
    if (reason == ACL_DENIED_AUTH) server.stat_acl_denied_auth++;
    else if (reason == ACL_DENIED_CMD) server.stat_acl_denied_cmd++;
    else if (reason == ACL_DENIED_CHANNEL) server.stat_acl_denied_channel++;
    else server.stat_acl_denied_key++;
    if (server.acllog_max_len == 0) {
        sdsfree(cinfo);
        return;
    }
    mstime_t now = mstime();
    /* The same refusal again within a minute: count it, move it to the front. */
    for (long long i = 0; i < aclLogLen && i < ACL_LOG_GROUP_SCAN; i++) {
        aclLogEntry *e = aclLog[i];
        if (e->reason == reason && e->context == context && e->server_only == server_only &&
            sdslen(e->object) == objlen &&
            !memcmp(e->object, object, objlen) && sdslen(e->username) == ulen &&
            !memcmp(e->username, username, ulen) && now - e->ctime < ACL_LOG_GROUP_MS) {
            e->count++;
            e->ctime = now;
            sdsfree(e->cinfo);
            e->cinfo = cinfo;
            memmove(aclLog + 1, aclLog, sizeof(*aclLog) * (size_t)i);
            aclLog[0] = e;
            return;
        }
    }
    aclLogEntry *e = zcalloc(sizeof(*e));
    e->count = 1;
    e->reason = reason;
    e->context = context;
    e->object = sdsnewlen(object, objlen);
    e->username = sdsnewlen(username, ulen);
    e->ctime = e->created = now;
    e->id = aclLogNextId++;
    e->cinfo = cinfo;
    e->server_only = server_only;
    aclLog = zrealloc(aclLog, sizeof(*aclLog) * (size_t)(aclLogLen + 1));
    memmove(aclLog + 1, aclLog, sizeof(*aclLog) * (size_t)aclLogLen);
    aclLog[0] = e;
    aclLogLen++;
    aclLogTrim();
}

void aclLogAdd(client *c, int reason, const char *object, size_t objlen, const char *username,
                      size_t ulen) {
    int context = (c->flags & CLIENT_IN_EXEC) ? LOG_CTX_MULTI : LOG_CTX_TOPLEVEL;
    aclLogAddEntry(reason, context, object, objlen, username, ulen, catClientInfoString(sdsempty(), c), 0);
}

void aclApplyLogMaxLen(void) { aclLogTrim(); }

static void aclLogReply(client *c, long long count) {
    static const char *reasons[] = {"", "command", "key", "auth", "channel"};
    long long seen = 0;
    for (long long i = 0; i < aclLogLen && seen < count; i++) seen += logEntrySeen(c->user, aclLog[i]);
    count = seen;
    mstime_t now = mstime();
    addReplyArrayLen(c, count);
    for (long long i = 0; count > 0; i++) {
        aclLogEntry *e = aclLog[i];
        if (!logEntrySeen(c->user, e)) continue;
        count--;
        addReplyMapLen(c, 10);
        addReplyBulkCString(c, "count");
        addReplyLongLong(c, e->count);
        addReplyBulkCString(c, "reason");
        addReplyBulkCString(c, reasons[e->reason]);
        addReplyBulkCString(c, "context");
        addReplyBulkCString(c, e->context == LOG_CTX_MULTI ? "multi" : "toplevel");
        addReplyBulkCString(c, "object");
        addReplyBulk(c, e->object, sdslen(e->object));
        addReplyBulkCString(c, "username");
        addReplyBulk(c, e->username, sdslen(e->username));
        addReplyBulkCString(c, "age-seconds");
        addReplyDouble(c, (double)(now - e->ctime) / 1000.0);
        addReplyBulkCString(c, "client-info");
        addReplyBulk(c, e->cinfo, sdslen(e->cinfo));
        addReplyBulkCString(c, "entry-id");
        addReplyLongLong(c, e->id);
        addReplyBulkCString(c, "timestamp-created");
        addReplyLongLong(c, e->created);
        addReplyBulkCString(c, "timestamp-last-updated");
        addReplyLongLong(c, e->ctime);
    }
}

void aclLogDenial(client *c, int reason, const char *object, size_t len) {
    if (object == NULL) object = "(no key)", len = 8;
    aclLogAdd(c, reason, object, len, c->user->name, sdslen(c->user->name));
}

void aclLogDenialServerOnly(client *c, int reason, const char *object, size_t len) {
    if (object == NULL) object = "(no key)", len = 8;
    int context = (c->flags & CLIENT_IN_EXEC) ? LOG_CTX_MULTI : LOG_CTX_TOPLEVEL;
    aclLogAddEntry(reason, context, object, len, c->user->name, sdslen(c->user->name),
                   catClientInfoString(sdsempty(), c), 1);
}

void aclLogDenialFrom(int reason, const char *object, size_t len, const char *username, size_t ulen,
                      const char *cinfo) {
    aclLogAddEntry(reason, LOG_CTX_TOPLEVEL, object, len, username, ulen, sdsnew(cinfo), 0);
}

void aclLogCommand(client *c) {
    long long count = 10;
    if (c->argc == 3) {
        if (!strcasecmp(c->argv[2], "reset")) {
            aclLogReset(c->user);
            addReplyOk(c);
            return;
        }
        if (getPositiveLongFromObjectOrReply(c, c->argv[2], &count, NULL) != C_OK) return;
    } else if (c->argc > 3) {
        addReplyErrorArity(c);
        return;
    }
    aclLogReply(c, count);
}
