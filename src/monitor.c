/* monitor.c -- MONITOR.
 *
 * A monitor gets one line per command the server runs, in Redis's format,
 * so redis-cli monitor and the tools that parse its output work unchanged:
 *
 *   +1700000000.123456 [0 127.0.0.1:54321] "SET" "k" "v"
 *   +1700000000.123456 [0 unix:/path/to/sock] "GET" "k"
 *
 * What is shown is what Redis shows: commands that ran (call()), not ones
 * refused before running; never administrative ones (CONFIG, DEBUG,
 * MONITOR itself...) nor those flagged CMD_SKIP_MONITOR; the commands of a
 * transaction as MULTI, each queued command when EXEC runs it, then EXEC;
 * a monitor's own commands too. Passwords are replaced by "(redacted)":
 * AUTH's arguments, HELLO's after AUTH, MIGRATE's after AUTH/AUTH2,
 * MOUNT's TOKEN (a segment's capability is a credential too), and CONFIG
 * SET's value of requirepass and masterauth (in SLOWLOG).
 *
 * One choice of ours: an argument of PROTO_BIG_ARG (32 KiB) or more is
 * shown as "(N bytes)" instead of its bytes. Such a value may never have
 * been in argv at all (SET and SEG.WRITE read it straight into its extent,
 * networking.c), and echoing megabytes of escaped payload per command would
 * mostly get monitors disconnected by their output limit.
 *
 * Costs. With no monitor attached a command pays one branch (call()). The
 * line is built once per command and copied to each monitor's output
 * buffer. A monitor that does not read its stream is bounded by the
 * client-output-buffer-limit pubsub class (32mb hard, 8mb for 60 s by
 * default) and disconnected past it. Redis checks monitors against the
 * normal class, which is unlimited by default, so one forgotten monitor
 * could grow the server without bound; a monitor's stream is pushed to
 * it whatever it asks, like pub/sub messages, hence that class.
 */
#include "monitor.h"

#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include "acl.h"
#include "zmalloc.h"

/* Marks in r[] the arguments that carry a password. Follows each command's
 * own parsing (networking.c, migrate.c) far enough to find them. */
int commandRedactedArgs(client *c, char *r) {
    serverCommand *cmd = c->cmd;
    int n = 0;
    if (cmd->proc == authCommand) {
        /* Every argument: a malformed AUTH is still someone's password. */
        for (int j = 1; j < c->argc; j++) r[j] = 1, n++;
    } else if (cmd->proc == helloCommand) {
        for (int j = 2; j < c->argc; j++) {
            int more = c->argc - 1 - j;
            if (!strcasecmp(c->argv[j], "auth") && more >= 2) {
                r[j + 1] = r[j + 2] = 1;
                n += 2;
                j += 2;
            } else if (!strcasecmp(c->argv[j], "setname") && more >= 1) {
                j++;
            } else {
                break;
            }
        }
    } else if (cmd->proc == migrateCommand) {
        for (int j = 6; j < c->argc; j++) {
            int more = c->argc - 1 - j;
            if (!strcasecmp(c->argv[j], "copy") || !strcasecmp(c->argv[j], "replace")) continue;
            if (!strcasecmp(c->argv[j], "auth") && more >= 1) {
                r[++j] = 1;
                n++;
            } else if (!strcasecmp(c->argv[j], "auth2") && more >= 2) {
                r[j + 1] = r[j + 2] = 1;
                n += 2;
                j += 2;
            } else {
                break; /* KEYS: the rest are keys; anything else: a syntax error */
            }
        }
    } else if (cmd->proc == configCommand && c->argc >= 4 && !strcasecmp(c->argv[1], "set")) {
        /* CONFIG SET's values of the password directives (MONITOR never
         * shows CONFIG; SLOWLOG does). */
        for (int j = 2; j + 1 < c->argc; j += 2) {
            if (!strcasecmp(c->argv[j], "requirepass") || !strcasecmp(c->argv[j], "masterauth")) {
                r[j + 1] = 1;
                n++;
            }
        }
    } else if (cmd->proc == mountCommand) {
        /* TOKEN's value is the segment's capability (t_segment.c). */
        for (int j = 3; j + 1 < c->argc; j += 2) {
            if (!strcasecmp(c->argv[j], "token")) {
                r[j + 1] = 1;
                n++;
            }
        }
    }
    return n;
}

sds monitorFormatCommand(client *c) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    sds s = sdscatprintf(sdsempty(), "+%ld.%06ld ", (long)tv.tv_sec, (long)tv.tv_usec);
    if (c->flags & CLIENT_UNIX_SOCKET) s = sdscatprintf(s, "[0 unix:%s]", server.unixsocket);
    else s = sdscatprintf(s, "[0 %s]", c->addr);
    char small[16], *redact = small;
    if (c->argc > (int)sizeof(small)) redact = zmalloc((size_t)c->argc);
    memset(redact, 0, (size_t)c->argc);
    commandRedactedArgs(c, redact);
    for (int j = 0; j < c->argc; j++) {
        /* Read in place: the bytes are in a segment, argv[j] is empty. */
        int inplace = c->argobj && c->argobj[j];
        size_t len = inplace ? c->arglen[j] : sdslen(c->argv[j]);
        s = sdscatlen(s, " ", 1);
        if (redact[j]) s = sdscat(s, "\"(redacted)\"");
        else if (inplace || len >= PROTO_BIG_ARG) s = sdscatprintf(s, "\"(%zu bytes)\"", len);
        else s = sdscatrepr(s, c->argv[j], len);
    }
    if (redact != small) zfree(redact);
    return sdscatlen(s, "\r\n", 2);
}

void monitorFeed(sds line, const client *from) {
    /* A monitor over its limit is only marked for closing (freeClientAsync),
     * so the array stays as it is during the loop. A tenant's monitor
     * shows its own user's commands only (acl.c). */
    for (size_t i = 0; i < server.nmonitors; i++) {
        client *m = server.monitors[i];
        if (aclUserSeesClient(m->user, from)) addReplyProto(m, line, sdslen(line));
    }
    sdsfree(line);
}

void monitorRemove(client *c) {
    if (!(c->flags & CLIENT_MONITOR)) return;
    for (size_t i = 0; i < server.nmonitors; i++) {
        if (server.monitors[i] != c) continue;
        memmove(server.monitors + i, server.monitors + i + 1, sizeof(client *) * (server.nmonitors - i - 1));
        server.nmonitors--;
        break;
    }
    c->flags &= ~CLIENT_MONITOR;
}

void monitorCommand(client *c) {
    if (c->flags & CLIENT_IN_EXEC) {
        /* EXEC owes one reply per command; a stream cannot be one. */
        addReplyError(c, "ERR MONITOR isn't allowed for DENY BLOCKING client");
        return;
    }
    if (c->flags & CLIENT_MONITOR) return; /* already: no reply, as Redis */
    if (server.nmonitors == server.monitors_cap) {
        server.monitors_cap = server.monitors_cap ? server.monitors_cap * 2 : 8;
        server.monitors = zrealloc(server.monitors, sizeof(client *) * server.monitors_cap);
    }
    server.monitors[server.nmonitors++] = c;
    c->flags |= CLIENT_MONITOR;
    addReplyOk(c);
}
