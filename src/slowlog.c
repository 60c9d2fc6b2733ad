/* slowlog.c -- the last N commands that took longer than a threshold.
 *
 * Entries keep a trimmed copy of the arguments (at most 32, each at most
 * 128 bytes, with a note of what was cut) so a slow 64 MiB SET is logged
 * without pinning 64 MiB of memory. The list is a ring of slowlog-max-len
 * entries; lowering the limit at run time trims it on the next push.
 *
 * Each entry records its user: a tenant (acl.c) gets and resets only its
 * own user's entries, so the log stays the server users' record whoever
 * has SLOWLOG.
 */
#include <string.h>
#include <strings.h>
#include <time.h>

#include "acl.h"
#include "monitor.h"
#include "server.h"
#include "zmalloc.h"

#define SLOWLOG_ENTRY_MAX_ARGC 32
#define SLOWLOG_ENTRY_MAX_STRING 128

/* server.slowlog holds entries oldest first; replies walk it backwards. */

void slowlogInit(void) {
    server.slowlog = NULL;
    server.slowlog_len = server.slowlog_cap = 0;
    server.slowlog_entry_id = 0;
}

static void slowlogFreeEntry(slowlogEntry *se) {
    for (int j = 0; j < se->argc; j++) sdsfree(se->argv[j]);
    zfree(se->argv);
    sdsfree(se->cname);
    sdsfree(se->peerid);
    sdsfree(se->user);
    zfree(se);
}

static slowlogEntry *slowlogCreateEntry(client *c, sds *argv, int argc, long long duration) {
    slowlogEntry *se = zmalloc(sizeof(*se));
    int sargc = argc > SLOWLOG_ENTRY_MAX_ARGC ? SLOWLOG_ENTRY_MAX_ARGC : argc;
    se->argc = sargc;
    se->argv = zmalloc(sizeof(sds) * (size_t)sargc);
    /* Passwords are not kept, as in Redis (and as MONITOR shows them). */
    char *redact = NULL;
    if (argv == c->argv && c->cmd) {
        redact = zcalloc((size_t)argc);
        if (commandRedactedArgs(c, redact) == 0) {
            zfree(redact);
            redact = NULL;
        }
    }
    for (int j = 0; j < sargc; j++) {
        if (redact && redact[j]) {
            se->argv[j] = sdsnew("(redacted)");
        } else if (sargc != argc && j == sargc - 1) {
            se->argv[j] = sdscatprintf(sdsempty(), "... (%d more arguments)", argc - sargc + 1);
        } else if (sdslen(argv[j]) > SLOWLOG_ENTRY_MAX_STRING) {
            se->argv[j] = sdsnewlen(argv[j], SLOWLOG_ENTRY_MAX_STRING);
            se->argv[j] = sdscatprintf(se->argv[j], "... (%zu more bytes)", sdslen(argv[j]) - SLOWLOG_ENTRY_MAX_STRING);
        } else {
            se->argv[j] = sdsdup(argv[j]);
        }
    }
    zfree(redact);
    se->time = time(NULL);
    se->duration = duration;
    se->id = server.slowlog_entry_id++;
    se->peerid = sdsnew(c->addr);
    se->cname = c->name ? sdsdup(c->name) : sdsempty();
    se->user = sdsdup(c->user->name);
    return se;
}

static void slowlogTrim(void) {
    long long drop = server.slowlog_len - server.slowlog_max_len;
    if (drop <= 0) return;
    for (long long i = 0; i < drop; i++) slowlogFreeEntry(server.slowlog[i]);
    memmove(server.slowlog, server.slowlog + drop, sizeof(slowlogEntry *) * (size_t)(server.slowlog_len - drop));
    server.slowlog_len -= drop;
}

void slowlogPushEntryIfNeeded(client *c, sds *argv, int argc, long long duration) {
    if (server.slowlog_log_slower_than < 0 || duration < server.slowlog_log_slower_than) return;
    if (server.slowlog_max_len == 0) {
        slowlogTrim();
        return;
    }
    if (server.slowlog_len == server.slowlog_cap) {
        server.slowlog_cap = server.slowlog_cap ? server.slowlog_cap * 2 : 16;
        server.slowlog = zrealloc(server.slowlog, sizeof(slowlogEntry *) * (size_t)server.slowlog_cap);
    }
    server.slowlog[server.slowlog_len++] = slowlogCreateEntry(c, argv, argc, duration);
    slowlogTrim();
}

void slowlogReset(void) {
    for (long long i = 0; i < server.slowlog_len; i++) slowlogFreeEntry(server.slowlog[i]);
    server.slowlog_len = 0;
}

static int slowlogVisible(const client *c, const slowlogEntry *se) {
    return aclUserSeesUser(c->user, se->user, sdslen(se->user));
}

/* SLOWLOG RESET: what c may see goes. For a tenant that is its own user's
 * entries: the log is the server's, and one tenant's RESET must not erase
 * the others' or the server users' record of slow commands. */
static void slowlogResetVisible(const client *c) {
    if (!aclUserRestricted(c->user)) {
        slowlogReset();
        return;
    }
    long long kept = 0;
    for (long long i = 0; i < server.slowlog_len; i++) {
        if (slowlogVisible(c, server.slowlog[i]))
            slowlogFreeEntry(server.slowlog[i]);
        else
            server.slowlog[kept++] = server.slowlog[i];
    }
    server.slowlog_len = kept;
}

void slowlogCommand(client *c) {
    const char *sub = c->argv[1];
    if (c->argc == 2 && !strcasecmp(sub, "help")) {
        static const char *help[] = {
            "GET [<count>]", "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:", "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name", "LEN", "    Return the length of the slowlog.", "RESET", "    Reset the slowlog.",
            NULL};
        addReplyHelp(c, help);
    } else if (c->argc == 2 && !strcasecmp(sub, "reset")) {
        slowlogResetVisible(c);
        addReplyOk(c);
    } else if (c->argc == 2 && !strcasecmp(sub, "len")) {
        long long n = 0;
        for (long long i = 0; i < server.slowlog_len; i++) n += slowlogVisible(c, server.slowlog[i]);
        addReplyLongLong(c, n);
    } else if ((c->argc == 2 || c->argc == 3) && !strcasecmp(sub, "get")) {
        long long count = 10;
        if (c->argc == 3) {
            /* Not a number gets the range's message too, as in Redis. */
            static const char *range = "ERR count should be greater than or equal to -1";
            if (getLongLongFromObjectOrReply(c, c->argv[2], &count, range) != C_OK) return;
            if (count < -1) {
                addReplyError(c, range);
                return;
            }
            if (count == -1) count = server.slowlog_len;
        }
        if (count > server.slowlog_len) count = server.slowlog_len;
        /* A tenant's count is of the entries it may see (its own user's). */
        long long shown = 0, last = server.slowlog_len;
        while (shown < count && last > 0) shown += slowlogVisible(c, server.slowlog[--last]);
        addReplyArrayLen(c, shown);
        for (long long i = server.slowlog_len - 1; i >= last; i--) {
            slowlogEntry *se = server.slowlog[i];
            if (!slowlogVisible(c, se)) continue;
            addReplyArrayLen(c, 6);
            addReplyLongLong(c, se->id);
            addReplyLongLong(c, (long long)se->time);
            addReplyLongLong(c, se->duration);
            addReplyArrayLen(c, se->argc);
            for (int j = 0; j < se->argc; j++) addReplyBulk(c, se->argv[j], sdslen(se->argv[j]));
            addReplyBulk(c, se->peerid, sdslen(se->peerid));
            addReplyBulk(c, se->cname, sdslen(se->cname));
        }
    } else {
        addReplySubcommandSyntaxError(c);
    }
}
