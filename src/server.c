/* server.c -- start-up, the cron, command dispatch and the small commands.
 *
 * The life of a request: networking.c parses it into c->argv, then
 * processCommand() finds the command in the table (commands.c), checks
 * arity and authentication, and call() runs it, timing it for INFO
 * commandstats and SLOWLOG. Nothing is executed before all arguments are
 * present and every check has passed, which is what makes a refused
 * command leave no state behind. After MULTI a command that passed the
 * checks is queued instead (multi.c), and one that failed them dooms the
 * transaction (flagTransaction), as in Redis.
 *
 * Background work (active expiry, eviction slices, incremental rehashing,
 * idle clients) runs from serverCron, hz times a second, each with a time
 * budget, so a client never waits behind housekeeping for more than a few
 * milliseconds.
 */
#include "latency.h"
#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "acl.h"
#include "anet.h"
#include "cluster.h"
#include "aof.h"
#include "http.h"
#include "migrate.h"
#include "monitor.h"
#include "multi.h"
#include "owner.h"
#include "pubsub.h"
#include "relay.h"
#include "store.h"
#include "tenantkeys.h"
#include "tenantquota.h"
#include "util.h"
#include "zerofree.h"
#include "zmalloc.h"

struct mooncakeServer server;

/* ---- logging ------------------------------------------------------------- */

void serverLogRaw(int level, const char *msg) {
    static const char marks[] = ".-*#";
    if (level < server.verbosity) return;
    int tostdout = server.logfile == NULL || server.logfile[0] == '\0';
    FILE *fp = tostdout ? stdout : fopen(server.logfile, "a");
    if (!fp) return;
    char buf[64];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int off = (int)strftime(buf, sizeof(buf), "%d %b %Y %H:%M:%S.", &tm);
    snprintf(buf + off, sizeof(buf) - (size_t)off, "%03d", (int)tv.tv_usec / 1000);
    fprintf(fp, "%d:M %s %c %s\n", (int)getpid(), buf, marks[level & 3], msg);
    fflush(fp);
    if (!tostdout) fclose(fp);
}

void serverLog(int level, const char *fmt, ...) {
    if (level < server.verbosity) return;
    char msg[LOG_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    serverLogRaw(level, msg);
}

void serverAssertFail(const char *expr, const char *file, int line) {
    serverLog(LL_WARNING, "=== ASSERTION FAILED === %s:%d '%s' is not true", file, line, expr);
    abort();
}

/* ---- command lookup and dispatch ----------------------------------------- */

/* Case-insensitive hashing lets argv[0] be looked up as it came off the
 * wire, with no lower-cased copy (a malloc and free per command). */
static uint64_t cmdHash(const void *key) {
    return dictGenCaseHashFunction(key, sdslen((sds)key));
}
static int cmdCompare(const void *a, const void *b) {
    return sdslen((sds)a) == sdslen((sds)b) && !strncasecmp(a, b, sdslen((sds)a));
}
static dictType commandDictType = {cmdHash, cmdCompare, NULL, NULL};

static void populateCommandTable(void) {
    server.commands = dictCreate(&commandDictType);
    for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
        cmd->fullname = sdsnew(cmd->name);
        sdstolower(cmd->fullname);
        serverAssert(dictAdd(server.commands, cmd->fullname, cmd) == DICT_OK);
        for (serverCommand *sub = cmd->subcommands; sub && sub->name; sub++) {
            sub->parent = cmd;
            sub->fullname = sdscatprintf(sdsempty(), "%s|%s", cmd->fullname, sub->name);
            sdstolower(sub->fullname);
        }
    }
    populateCommandDocs();
}

/* The last two names found, as the client sent them. A pipeline repeats
 * one command (GET GET ...) or alternates two (PUT.START PUT.END ...), and
 * each request used to pay the table's case-insensitive siphash and
 * strncasecmp -- twice when prefetch.c had looked its name up first: about
 * 400 instructions, a tenth of a pipelined GET's (callgrind, BENCHMARKS.md
 * "Instructions per request"). A name equal byte for byte to one found
 * before is the same command: the table never changes after start-up, so
 * the pointer stays valid. A miss (a name longer than the slot, another
 * case, an unknown command) is looked up in the table as before. */
#define CMD_CACHE_NAME 32
static struct {
    char name[CMD_CACHE_NAME];
    size_t len;
    serverCommand *cmd;
} cmdCache[2];
static int cmdCacheNext;

static serverCommand *lookupCached(const char *name, size_t len) {
    for (int i = 0; i < 2; i++)
        if (cmdCache[i].cmd && cmdCache[i].len == len && memcmp(cmdCache[i].name, name, len) == 0)
            return cmdCache[i].cmd;
    return NULL;
}

static serverCommand *lookupBySds(sds name) {
    size_t len = sdslen(name);
    serverCommand *cmd = lookupCached(name, len);
    if (cmd) return cmd;
    dictEntry *de = dictFind(server.commands, name);
    if (de == NULL) return NULL;
    cmd = de->val;
    if (len <= CMD_CACHE_NAME) {
        memcpy(cmdCache[cmdCacheNext].name, name, len);
        cmdCache[cmdCacheNext].len = len;
        cmdCache[cmdCacheNext].cmd = cmd;
        cmdCacheNext ^= 1;
    }
    return cmd;
}

static serverCommand *lookupSubcommand(serverCommand *container, const char *name) {
    for (serverCommand *sub = container->subcommands; sub && sub->name; sub++)
        if (!strcasecmp(sub->name, name)) return sub;
    return NULL;
}

/* By full name, as COMMAND INFO/DOCS take it: "get", or "config|get" for a
 * subcommand. "get|key" is no command (GET has no subcommands), nor is
 * "config" with an unknown subcommand. */
serverCommand *lookupCommandByName(const char *name) {
    const char *bar = strchr(name, '|');
    sds key = sdsnewlen(name, bar ? (size_t)(bar - name) : strlen(name));
    serverCommand *cmd = lookupBySds(key);
    sdsfree(key);
    if (cmd == NULL || bar == NULL) return cmd;
    return cmd->subcommands && !strchr(bar + 1, '|') ? lookupSubcommand(cmd, bar + 1) : NULL;
}

/* By a name that is not an sds (prefetch.c reads it in the query buffer);
 * top-level commands only, as lookupBySds. */
serverCommand *lookupCommandBuf(const char *name, size_t len) {
    serverCommand *cmd = lookupCached(name, len);
    if (cmd) return cmd;
    union {
        struct sdshdr h;
        char raw[sizeof(struct sdshdr) + 64];
    } tmp;
    if (len >= sizeof(tmp.raw) - sizeof(struct sdshdr)) return NULL; /* no command name is this long */
    sds s = tmp.raw + sizeof(struct sdshdr);
    tmp.h.len = (uint32_t)len;
    tmp.h.alloc = (uint32_t)len;
    memcpy(s, name, len);
    s[len] = '\0';
    return lookupBySds(s);
}

/* The container itself when argc == 1 (so its arity error is reported),
 * NULL for an unknown subcommand. */
serverCommand *lookupCommand(sds *argv, int argc) {
    serverCommand *cmd = lookupBySds(argv[0]);
    if (!cmd || !cmd->subcommands || argc < 2) return cmd;
    return lookupSubcommand(cmd, argv[1]);
}

/* A command refused before it ran, whatever refused it (unknown, arity,
 * auth, ACL, a subscriber's context, OOM, ...). Inside MULTI that dooms
 * the transaction; a refused EXEC ends it there and then with -EXECABORT
 * (multi.c), or the client would stay in MULTI queueing what it meant to
 * run at once. */
static void rejectCommand(client *c, const char *err) {
    flagTransaction(c);
    if (c->cmd) c->cmd->rejected_calls++;
    if (c->cmd && c->cmd->proc == execCommand) execCommandAbort(c, err);
    else addReplyError(c, err);
}

/* Runs c->cmd on c->argv. Also how EXEC runs each queued command, so it
 * may nest: the outer call keeps the client protected. */
void call(client *c) {
    serverCommand *cmd = c->cmd;
    sds monitor_line = monitorLineFor(c);
    c->lastcmd = cmd;
    long long start = monoUs();
    int nested = c->flags & CLIENT_PROTECTED;
    c->flags |= CLIENT_PROTECTED;
    cmd->proc(c);
    if (!nested) c->flags &= ~CLIENT_PROTECTED;
    if (c->flags & CLIENT_RERUN) {
        /* Blocked before it did anything (relay.c): it is counted, timed
         * and shown to monitors when it runs again. */
        sdsfree(monitor_line);
        return;
    }
    long long duration = monoUs() - start;
    cmd->calls++;
    cmd->usec += duration;
    if (server.latency_tracking) latencyRecord(&cmd->latency, duration > 0 ? (uint64_t)duration : 0);
    server.stat_numcommands++;
    if (!(cmd->flags & CMD_SKIP_SLOWLOG)) slowlogPushEntryIfNeeded(c, c->argv, c->argc, duration);
    if (server.latency_monitor_threshold > 0 && !(cmd->flags & CMD_SKIP_SLOWLOG))
        latencyMonitorSample(cmd->flags & CMD_FAST ? "fast-command" : "command", duration / 1000);
    if (monitor_line) monitorFeed(monitor_line, c);
}

/* Pool bytes this command's values already took: large SET/MSET values are
 * read straight into the pool (networking.c) before the command runs. */
static uint64_t placedArgBytes(const client *c) {
    uint64_t n = 0;
    for (int j = 0; c->argobj && j < c->argc; j++)
        if (c->argobj[j]) n += (c->argobj[j]->len + SEGMENT_ALIGN - 1) & ~(uint64_t)(SEGMENT_ALIGN - 1);
    return n;
}

int processCommand(client *c) {
    c->cmd = lookupCommand(c->argv, c->argc);
    if (!c->cmd) {
        serverCommand *container = lookupBySds(c->argv[0]);
        sds err;
        if (container && container->subcommands) {
            sds upper = sdsnew(container->name);
            sdstoupper(upper);
            err = sdscatprintf(sdsempty(), "ERR unknown subcommand '%.128s'. Try %s HELP.", c->argv[1], upper);
            sdsfree(upper);
        } else {
            sds args = sdsempty();
            for (int i = 1; i < c->argc && sdslen(args) < 128; i++)
                args = sdscatprintf(args, "'%.*s' ", 128 - (int)sdslen(args), c->argv[i]);
            err = sdscatprintf(sdsempty(), "ERR unknown command '%.128s', with args beginning with: %s",
                               c->argv[0], args);
            sdsfree(args);
        }
        rejectCommand(c, err);
        sdsfree(err);
        return C_OK;
    }
    if ((c->cmd->arity > 0 && c->cmd->arity != c->argc) || c->argc < -c->cmd->arity) {
        sds err = sdscatprintf(sdsempty(), "ERR wrong number of arguments for '%s' command", c->cmd->fullname);
        rejectCommand(c, err);
        sdsfree(err);
        return C_OK;
    }
    if (!c->authenticated && !(c->cmd->flags & CMD_NOAUTH)) {
        rejectCommand(c, "-NOAUTH Authentication required.");
        return C_OK;
    }
    int keypos, acl = aclCheckCommand(c, &keypos);
    if (acl != ACL_OK) {
        sds err = aclDenialError(c, acl, keypos);
        rejectCommand(c, err);
        sdsfree(err);
        return C_OK;
    }
    if ((c->flags & CLIENT_MULTI) && (c->cmd->flags & CMD_NO_MULTI)) {
        rejectCommand(c, "ERR Command not allowed inside a transaction");
        return C_OK;
    }
    if (server.cluster_enabled && clusterRedirect(c)) {
        /* A transaction must run where all its keys are: EXEC redirected
         * is EXEC refused (the reply is the redirection, as in Redis). */
        if (c->cmd->proc == execCommand) discardTransaction(c);
        else flagTransaction(c);
        c->cmd->rejected_calls++;
        clusterResetAsking(c);
        return C_OK;
    }
    if (c->argerr) {
        if (!strncmp(c->argerr, "-OOM", 4)) server.stat_oom_rejections++;
        rejectCommand(c, c->argerr);
        return C_OK;
    }
    /* A RESP2 subscriber's replies must look like its messages. */
    sds refusal;
    if ((c->flags & CLIENT_PUBSUB) && c->resp == 2 && (refusal = pubsubRefusal(c)) != NULL) {
        rejectCommand(c, refusal);
        sdsfree(refusal);
        return C_OK;
    }
    /* A monitor's connection carries its stream; Redis keeps the keyspace
     * out of it (the replies would be lost among the lines). */
    if ((c->flags & CLIENT_MONITOR) && (c->cmd->flags & (CMD_READONLY | CMD_WRITE))) {
        rejectCommand(c, "ERR Replica can't interact with the keyspace");
        return C_OK;
    }
    /* CLIENT PAUSE: before anything that could change the dataset, even
     * eviction to make room (networking.c). */
    if (server.pause_type != PAUSE_NONE && pauseBlocksCommand(c)) return C_OK;
    /* maxmemory bounds the whole dataset, keys and objects' heap with the
     * pool's bytes (store.c): a write over it evicts first, or is refused
     * as Redis refuses it. The cost bounds what the command can add to the
     * heap: its arguments (a key is copied at most twice, a value goes to
     * the pool) and a generous 128 bytes of header, table entry and
     * extension per argument. */
    if (server.maxmemory && (c->cmd->flags & CMD_DENYOOM) &&
        storeMakeRoomForDataset(2 * (uint64_t)c->argv_bytes + 128 * (uint64_t)c->argc, placedArgBytes(c)) != C_OK) {
        server.stat_oom_rejections++;
        /* A put's refusal keeps the put's word (libmooncake maps both). */
        rejectCommand(c, c->cmd->group && !strcmp(c->cmd->group, "store")
                             ? "-NOSPACE used memory > 'maxmemory' (keys and objects' heap count too)"
                             : "-OOM command not allowed when used memory > 'maxmemory'.");
        return C_OK;
    }
    /* tenant-maxmemory: a tenant past its bound (by the one command that
     * took it there) evicts its own values first (tenantquota.c). */
    const char *quota_err;
    if (server.tenant_maxmemory && (c->cmd->flags & CMD_DENYOOM) && aclUserRestricted(c->user) &&
        tenantQuotaBeforeCommand(c, &quota_err) != C_OK) {
        server.stat_oom_rejections++;
        rejectCommand(c, quota_err);
        return C_OK;
    }
    /* A log that cannot be written: writes are refused, as Redis's MISCONF. */
    const char *aof_refusal;
    if ((c->cmd->flags & CMD_WRITE) && (aof_refusal = aofWriteRefusal()) != NULL) {
        rejectCommand(c, aof_refusal);
        return C_OK;
    }
    /* A replica takes no writes; a primary that may have lost its slots
     * (fencing) or is handing them over takes none either. */
    if ((c->cmd->flags & CMD_WRITE) && server.cluster && (aof_refusal = replWriteRefusal(c)) != NULL) {
        rejectCommand(c, aof_refusal);
        return C_OK;
    }
    if ((c->flags & CLIENT_MULTI) && !multiRunsNow(c->cmd)) {
        if (multiQueueOverLimit(c)) {
            rejectCommand(c, "ERR transaction discarded: the queued commands passed client-query-buffer-limit");
            return C_OK;
        }
        queueMultiCommand(c);
        addReplyProto(c, "+QUEUED\r\n", 9);
        return C_OK;
    }
    server.current_client = c;
    call(c);
    /* ASKING holds for the command's run again after a block. */
    if (server.cluster_enabled && !(c->flags & CLIENT_RERUN)) clusterResetAsking(c);
    return C_OK;
}

/* ---- the busy-poll governor --------------------------------------------
 *
 * busy-poll-us (ae.c) trades a core for latency: after I/O the loop spins
 * instead of sleeping, so the next request does not pay a wake-up. That is
 * a good trade only while the core is otherwise idle. On a host where the
 * runnable tasks already fill the CPUs we may run on -- three nodes on a
 * 2-core box, a node beside an inference engine, the benchmark client
 * itself on a small VM -- every microsecond spun is taken from a process
 * that would have done work, and the nodes slow each other down (three
 * nodes from mooncake.conf on 2 cores ran small SET/GET at 0.87x a Redis
 * Cluster, issue 27). So the server decides, once a second, whether its
 * windows open at all (aeSetBusyPollActive); busy-poll-us stays the upper
 * bound and 0 still turns spinning off for good.
 *
 * Inputs. (1) Load: the cron samples the host's runnable tasks (the R of
 * /proc/loadavg's R/T: tasks running or waiting for a CPU, ourselves
 * included, since we are running when we read it) hz times a second, and
 * the decision takes the mean over the last second, so one burst does not
 * flip it. The count is host-wide; when sched_getaffinity allows fewer CPUs
 * than are online it is scaled by allowed/online (the expected share on
 * our CPUs, assuming an even spread). Spinning pays while the mean is at
 * most cpus + 1/2: a node and its client on two cores (2 runnable) keep
 * spinning; three spinning nodes and a client (4) stop. Once they stop,
 * nodes that are busy serving still count as runnable, so the verdict
 * holds under load rather than flapping; when the host quietens it turns
 * back on within a second. (2) Waste: ae.c already backs off from windows
 * that keep ending empty, but a pattern it lets through (every other
 * window empty, say) can still burn a core. A second in which the spin
 * wasted more than a tenth of a core and more than 200 us per event it
 * caught (a wake-up costs 10-20 us) turns spinning off for 1 s, then 2,
 * 4 ... 16 s if it keeps recurring, after which one second of spinning
 * probes again; a second that pays resets the back-off.
 *
 * (3) appendfsync always: every iteration that wrote ends in an fsync of
 * the log, a sleep of its own, and the next request comes a client round
 * trip after the reply; a spin then only takes the CPU the log's flush and
 * the clients need (SET with appendfsync always, 2 cores: 290k/s spinning
 * against 315k/s not, 2.54 against 2.29 us of server CPU per request;
 * BENCHMARKS.md), so it is off, reason fsync-always.
 *
 * busy-poll-auto no skips these rules (reason "always"): for a node with
 * cores of its own, where a busy host's other work should not take the
 * spin away -- a sleeping loop woken on an overloaded host can wait a
 * scheduler slice for a CPU, which a spinning one does not.
 *
 * INFO stats shows the verdict: busy_poll_active, busy_poll_reason
 * (idle-cores: spinning; cores-busy: the load; wasteful: the waste rule; fsync-always: rule 3;
 * always: busy-poll-auto no; disabled: busy-poll-us 0), and the inputs (busy_poll_runnable, the mean,
 * and busy_poll_cpus). DEBUG BUSYPOLL SAMPLE feeds the decision made-up
 * inputs, one step per call, and stops the cron's own steps until DEBUG
 * BUSYPOLL AUTO, so tests do not depend on the test machine's load. */

#define BP_WASTE_FRACTION 10   /* wasted more than 1/10 of a core ... */
#define BP_WASTE_PER_CATCH 200 /* ... and more than this many us per catch */
#define BP_MAX_HOLD 16         /* seconds off, at most, after waste */

static struct {
    int active;
    const char *reason;
    double runnable; /* mean over the last step, scaled to our CPUs */
    int cpus;
    double sum;      /* samples since the last step */
    int samples;
    long long last_step_us, last_wasted, last_caught;
    int hold, backoff; /* waste: steps still off; the next hold */
    int manual;        /* DEBUG BUSYPOLL SAMPLE took over */
} bp = {1, "idle-cores", 0, 1, 0, 0, 0, 0, 0, 0, 1, 0};

/* CPUs we may run on, and the factor that brings a host-wide count to them. */
static int busyPollCpus(double *scale) {
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cpus = (int)online;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
    if (cpus < 1) cpus = 1;
    if (online < cpus) online = cpus;
    *scale = (double)cpus / (double)online;
    return cpus;
}

/* The R of R/T in /proc/loadavg, or -1. */
static int busyPollRunnable(void) {
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd == -1) return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    int running, total;
    if (sscanf(buf, "%*s %*s %*s %d/%d", &running, &total) != 2 || running < 0) return -1;
    return running;
}

/* One decision from one second's inputs (see the top of this section). */
static void busyPollStep(double runnable, int cpus, long long wasted_us, long long caught, long long elapsed_us) {
    bp.runnable = runnable;
    bp.cpus = cpus;
    int was = bp.active;
    if (server.busy_poll_us == 0) {
        bp.active = 0, bp.reason = "disabled";
    } else if (!server.busy_poll_auto) {
        bp.active = 1, bp.reason = "always";
    } else if (aofOn && server.aof_fsync == AOF_FSYNC_ALWAYS) {
        bp.active = 0, bp.reason = "fsync-always";
    } else if (runnable > cpus + 0.5) {
        bp.active = 0, bp.reason = "cores-busy";
    } else if (bp.hold > 0) {
        bp.hold--;
        bp.active = 0, bp.reason = "wasteful";
    } else if (was && wasted_us > elapsed_us / BP_WASTE_FRACTION && wasted_us > caught * BP_WASTE_PER_CATCH) {
        bp.hold = bp.backoff - 1; /* this step is the first second off */
        if (bp.backoff < BP_MAX_HOLD) bp.backoff *= 2;
        bp.active = 0, bp.reason = "wasteful";
    } else {
        if (was && strcmp(bp.reason, "idle-cores") == 0) bp.backoff = 1; /* a second that paid */
        bp.active = 1, bp.reason = "idle-cores";
    }
    if (server.el) aeSetBusyPollActive(server.el, bp.active);
}

/* From the cron: a load sample every tick, a decision every second. */
static void busyPollCron(void) {
    if (bp.manual || server.el == NULL) return;
    int r = busyPollRunnable();
    if (r >= 0) {
        bp.sum += r;
        bp.samples++;
    }
    long long now = aeMonotonicUs();
    if (bp.last_step_us == 0) {
        bp.last_step_us = now;
        bp.last_wasted = server.el->spin_wasted_us;
        bp.last_caught = server.el->spin_caught;
        return;
    }
    if (now - bp.last_step_us < 1000000) return;
    double scale;
    int cpus = busyPollCpus(&scale);
    double runnable = bp.samples ? bp.sum / bp.samples * scale : 0;
    busyPollStep(runnable, cpus, server.el->spin_wasted_us - bp.last_wasted, server.el->spin_caught - bp.last_caught,
                 now - bp.last_step_us);
    bp.sum = 0;
    bp.samples = 0;
    bp.last_step_us = now;
    bp.last_wasted = server.el->spin_wasted_us;
    bp.last_caught = server.el->spin_caught;
}

/* CONFIG SET busy-poll-us: 0 turns the windows off now; a value turns them
 * back on until the next step says otherwise. */
void busyPollConfigChanged(void) {
    double scale;
    if (!bp.manual) bp.cpus = busyPollCpus(&scale); /* shown before the first step */
    bp.hold = 0;
    bp.backoff = 1;
    if (server.busy_poll_us == 0) bp.active = 0, bp.reason = "disabled";
    else if (strcmp(bp.reason, "disabled") == 0) bp.active = 1, bp.reason = "idle-cores";
    if (server.el) aeSetBusyPollActive(server.el, bp.active);
}

sds busyPollInfo(sds s) {
    return sdscatprintf(s,
                        "busy_poll_active:%d\r\n"
                        "busy_poll_reason:%s\r\n"
                        "busy_poll_runnable:%.2f\r\n"
                        "busy_poll_cpus:%d\r\n",
                        bp.active, bp.reason, bp.runnable, bp.cpus);
}

/* ---- cron and the event loop hooks -------------------------------------- */

static int serverCron(aeEventLoop *el, long long id, void *clientData) {
    (void)el, (void)id, (void)clientData;
    long long period_us = 1000000 / server.hz;
    server.cron_loops++;
    serverVisit(VISITS_CRON_TICKS, 1);
    if (server.shutdown_asap) {
        if (prepareForShutdown(0) == C_OK) exit(0);
        server.shutdown_asap = 0;
    }
    clientsCron();
    memoryUsedUpdatePeak();
    statsSampleInstantaneous();
    /* At most a quarter of the loop for expiry, as Redis's slow cycle. */
    /* Under CLIENT PAUSE the dataset holds still, as in Redis: no key is
     * expired or evicted (a read answers an expired key as gone; it goes
     * when the pause ends), so what replicas and the log hold does not
     * move either (networking.c). */
    if (!pauseHoldsDataset()) {
        /* Durations on the monotonic clock, as the crons' budgets: a
         * wall-clock step is not a slow expiry cycle. */
        long long t0 = server.latency_monitor_threshold > 0 ? monoMs() : 0;
        storeActiveExpireCycle(period_us / 4);
        if (t0) {
            long long t1 = monoMs();
            latencyMonitorSample("expire-cycle", t1 - t0);
            t0 = t1;
        }
        storeEvictionCron(period_us / 10);
        if (t0) latencyMonitorSample("eviction-cycle", monoMs() - t0);
    }
    storeRehashCron(1000);
    ownerCron();
    segmentCron();
    clusterCron();
    replCron();
    migrateCloseTimedoutSockets();
    relayCron();
    storePendingCron(period_us / 20);
    storeDeferredFreeCron();
    storeReaperCron(period_us / 10);
    aofCron();
    busyPollCron();
    return (int)(1000 / server.hz);
}

void updateCachedTime(void) {
    server.mstime = mstime();
    server.monotime = monoMs();
}

static void afterSleep(aeEventLoop *el) {
    (void)el;
    updateCachedTime();
}

static void beforeSleep(aeEventLoop *el) {
    (void)el;
    /* First: the commands it runs again queue replies for the writes. */
    relayBeforeSleep();
    pauseBeforeSleep();
    /* The log before the replies: what a reply acknowledges is written
     * (and with appendfsync always, synced) first (aof.c). */
    aofBeforeSleep();
    /* Records to the replicas; with cluster-replica-ack the replies of
     * writes are held until they acknowledge (replication.c). */
    replBeforeSleep();
    changedKeysReset(); /* both have written this iteration's changes out */
    handleClientsWithPendingWrites();
    freeClientsInAsyncFreeQueue();
    /* An eviction round in progress gets a slice every iteration, not only
     * every cron tick, so it finishes quickly without blocking anyone. */
    if (server.evict_pending) storeEvictionCron(1000);
    /* Freed extents the zeroing thread finished go back to the allocator
     * (zerofree.c): one atomic load when there are none. */
    zerofreeReclaim(0);
}

/* ---- listeners ----------------------------------------------------------- */

int listenToPort(void) {
    char err[ANET_ERR_LEN];
    server.ipfd_count = 0;
    for (int j = 0; j < server.bindaddr_count; j++) {
        const char *addr = server.bindaddr[j];
        int optional = *addr == '-';
        if (optional) addr++;
        err[0] = '\0';
        int fd = anetTcpServer(err, server.port, addr, server.tcp_backlog);
        if (fd == ANET_ERR) {
            if (optional && (errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT ||
                             errno == ESOCKTNOSUPPORT || errno == EINVAL)) {
                serverLog(LL_NOTICE, "Skipping optional bind address %s: %s", addr, err);
                continue;
            }
            serverLog(LL_WARNING, "Warning: Could not create server TCP listening socket %s:%d: %s",
                      addr, server.port, err);
            closeListeners();
            return C_ERR;
        }
        anetNonBlock(NULL, fd);
        server.ipfd[server.ipfd_count++] = fd;
    }
    return C_OK;
}

void closeListeners(void) {
    for (int j = 0; j < server.ipfd_count; j++) {
        aeDeleteFileEvent(server.el, server.ipfd[j], AE_READABLE);
        close(server.ipfd[j]);
    }
    server.ipfd_count = 0;
    if (server.sofd != -1) {
        aeDeleteFileEvent(server.el, server.sofd, AE_READABLE);
        close(server.sofd);
        server.sofd = -1;
        if (server.unixsocket) unlink(server.unixsocket);
    }
}

static void sigShutdownHandler(int sig) {
    if (server.shutdown_asap && sig == SIGINT) {
        /* Second Ctrl-C: the user means it. */
        _exit(1);
    }
    server.shutdown_asap = 1;
}

static void setupSignalHandlers(void) {
    struct sigaction act;
    memset(&act, 0, sizeof(act));
    sigemptyset(&act.sa_mask);
    act.sa_handler = sigShutdownHandler;
    sigaction(SIGTERM, &act, NULL);
    sigaction(SIGINT, &act, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    /* A file past RLIMIT_FSIZE: write() and ftruncate() fail with EFBIG,
     * which the log handles as a disk refusing writes (-MISCONF until it
     * takes them again), instead of the signal killing the server with no
     * word in its log. */
    signal(SIGXFSZ, SIG_IGN);
}

/* The descriptors the server may hold at once: every client (RESP and
 * HTTP), the connections to segment hosts (relay.c: those in flight and the
 * idle ones kept) and a reserve for listeners, files and the log. The one
 * owner of that count: start-up (adjustOpenFilesLimit) and CONFIG SET of
 * any directive in it (serverApplyFdLimits) both ask here. */
long long serverFdsNeeded(void) {
    return server.maxclients + server.http_maxclients + server.remote_get_max_inflight + RELAY_IDLE_MAX +
           CONFIG_MIN_RESERVED_FDS;
}

/* The event loop's bound on descriptor numbers: what may be open, plus
 * slack for those libraries open on their own (curl, libmicrohttpd). */
static int eventLoopSetSize(void) { return (int)serverFdsNeeded() + 96; }

/* At start-up the fd limit is raised to cover serverFdsNeeded(); when the OS
 * refuses, maxclients shrinks to fit and the log says so (as Redis does). */
static void adjustOpenFilesLimit(void) {
    long long relays = server.remote_get_max_inflight + RELAY_IDLE_MAX;
    rlim_t want = (rlim_t)serverFdsNeeded();
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == -1) return;
    if (limit.rlim_cur >= want) return;
    struct rlimit nl = {want, limit.rlim_max > want ? limit.rlim_max : want};
    if (setrlimit(RLIMIT_NOFILE, &nl) == 0) return;
    nl.rlim_cur = nl.rlim_max = limit.rlim_max;
    if (limit.rlim_max > limit.rlim_cur) setrlimit(RLIMIT_NOFILE, &nl);
    getrlimit(RLIMIT_NOFILE, &limit);
    long long fit = (long long)limit.rlim_cur - CONFIG_MIN_RESERVED_FDS - server.http_maxclients - relays;
    if (fit < 1) fit = 1;
    serverLog(LL_WARNING, "You requested maxclients of %lld requiring at least %llu max file "
              "descriptors; the limit is %llu, so maxclients is now %lld.",
              server.maxclients, (unsigned long long)want, (unsigned long long)limit.rlim_cur, fit);
    server.maxclients = fit;
}

/* CONFIG SET of a directive in serverFdsNeeded(): the fd limit and the event
 * loop grow to cover the new count, or the change is refused (*err) and
 * config.c restores the old value: a running server never shrinks what it
 * was promised (as Redis refuses maxclients it cannot serve). Never shrinks
 * the loop either: descriptors above a new, lower bound may be open. */
int serverApplyFdLimits(const char **err) {
    if (server.el == NULL) return C_OK; /* start-up: initServer sizes things */
    rlim_t need = (rlim_t)serverFdsNeeded();
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && need > rl.rlim_cur) {
        struct rlimit nl = {need, rl.rlim_max};
        if (nl.rlim_cur > nl.rlim_max || setrlimit(RLIMIT_NOFILE, &nl) == -1) {
            *err = "The operating system is not able to handle the specified number of clients";
            return C_ERR;
        }
    }
    if (eventLoopSetSize() > aeGetSetSize(server.el) && aeResizeSetSize(server.el, eventLoopSetSize()) == AE_ERR) {
        *err = "The event loop cannot be resized to the specified number of clients";
        return C_ERR;
    }
    return C_OK;
}

static void createPidFile(void) {
    if (!server.pidfile || !server.pidfile[0]) return;
    FILE *fp = fopen(server.pidfile, "w");
    if (fp) {
        fprintf(fp, "%d\n", (int)getpid());
        fclose(fp);
    } else {
        serverLog(LL_WARNING, "Failed to write PID file %s: %s", server.pidfile, strerror(errno));
    }
}

static void daemonize(void) {
    if (fork() != 0) exit(0);
    setsid();
    int fd = open("/dev/null", O_RDWR, 0);
    if (fd != -1) {
        dup2(fd, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        if (fd > STDERR_FILENO) close(fd);
    }
}

/* Clients are accepted only once the dataset is loaded. The listeners are
 * bound before (a port in use is found at once, and connections made
 * meanwhile wait in the backlog), but cluster mode runs the event loop
 * while it waits for etcd at start-up (clusterInit, up to 5 s), and a
 * client served then would see an empty store: DBSIZE 0, a write that the
 * load then replays over, a host's HEARTBEAT told its owner is unknown so
 * that it mounts a fresh segment beside the one its objects come back in. */
static void acceptClients(void) {
    for (int j = 0; j < server.ipfd_count; j++)
        if (aeCreateFileEvent(server.el, server.ipfd[j], AE_READABLE, acceptTcpHandler, NULL) == AE_ERR) {
            serverLog(LL_WARNING, "Unrecoverable error creating server.ipfd file event.");
            exit(1);
        }
    if (server.sofd > 0 &&
        aeCreateFileEvent(server.el, server.sofd, AE_READABLE, acceptUnixHandler, NULL) == AE_ERR) {
        serverLog(LL_WARNING, "Unrecoverable error creating server.sofd file event.");
        exit(1);
    }
}

/* The unix socket is our file from the moment it is bound: a start-up that
 * fails after that (a busy http-port, a pool too big, a damaged AOF, etcd
 * out of reach) and any later exit() would otherwise leave it behind in
 * /tmp. SHUTDOWN has unlinked it already (sofd -1); a fork's child never
 * runs this (_exit), and the pid check keeps it so should one ever exit(). */
static void removeUnixSocketAtExit(void) {
    if (server.sofd != -1 && server.unixsocket && getpid() == server.pid) unlink(server.unixsocket);
}

static void initServer(void) {
    char err[ANET_ERR_LEN * 2];
    setupSignalHandlers();
    server.pid = getpid();
    server.starttime_ms = server.stat_starttime = mstime();
    server.starttime_mono = monoMs();
    getRandomHexChars(server.runid, 40);
    server.runid[40] = '\0';
    server.sofd = -1;
    adjustOpenFilesLimit();
    /* HTTP connections are watched by libmicrohttpd's own epoll set, not
     * ae's, but their descriptors take numbers below ae's bound too. */
    server.el = aeCreateEventLoop(eventLoopSetSize());
    server.pause_timer = -1;
    if (!server.el) {
        serverLog(LL_WARNING, "Failed creating the event loop: %s", strerror(errno));
        exit(1);
    }
    aeSetBusyPoll(server.el, server.busy_poll_us);
    busyPollConfigChanged();
    if (server.port != 0 && listenToPort() == C_ERR) {
        serverLog(LL_WARNING, "Failed listening on port %d (tcp), aborting.", server.port);
        exit(1);
    }
    if (server.unixsocket && server.unixsocket[0]) {
        server.sofd = anetUnixServer(err, server.unixsocket, server.unixsocketperm, server.tcp_backlog);
        if (server.sofd == ANET_ERR) {
            serverLog(LL_WARNING, "Failed opening Unix socket: %s", err);
            exit(1);
        }
        anetNonBlock(NULL, server.sofd);
        atexit(removeUnixSocketAtExit);
    }
    if (server.ipfd_count == 0 && server.sofd < 0) {
        serverLog(LL_WARNING, "Configured to not listen anywhere, exiting.");
        exit(1);
    }
    multiInit();
    if (storeInit(err, sizeof(err)) != C_OK) {
        serverLog(LL_WARNING, "Cannot create the memory pool: %s", err);
        exit(1);
    }
    dataPlaneSetSelfEndpoints();
    slowlogInit();
    clusterInit();
    aofLoadAtStart();
    acceptClients();
    if (httpInit(err, sizeof(err)) != C_OK) {
        serverLog(LL_WARNING, "Failed listening for HTTP (http-port %lld), aborting: %s", server.http_port, err);
        exit(1);
    }
    aeCreateTimeEvent(server.el, 1, serverCron, NULL, NULL);
    aeSetBeforeSleepProc(server.el, beforeSleep);
    aeSetAfterSleepProc(server.el, afterSleep);
    updateCachedTime();
}

int prepareForShutdown(int force) {
    serverLog(LL_WARNING, "User requested shutdown...");
    /* What was acknowledged is written and synced first: if it cannot be,
     * the server keeps serving (and refusing writes) rather than exit. */
    if (aofShutdown(force) != C_OK) {
        serverLog(LL_WARNING, "Errors trying to shut down the server: it keeps running. Check the logs.");
        return C_ERR;
    }
    closeListeners();
    httpShutdown();
    if (server.pidfile && server.pidfile[0]) unlink(server.pidfile);
    zerofreeShutdown(); /* no thread left writing the pool while we exit */
    serverLog(LL_WARNING, "Mooncake is now ready to exit, bye bye...");
    return C_OK;
}

/* ---- small commands ------------------------------------------------------ */

void pingCommand(client *c) {
    if (c->argc > 2) {
        addReplyErrorArity(c);
        return;
    }
    if ((c->flags & CLIENT_PUBSUB) && c->resp == 2) {
        /* Shaped like a message, so a RESP2 subscriber can read it among them. */
        addReplyArrayLen(c, 2);
        addReplyBulk(c, "pong", 4);
        if (c->argc == 1) addReplyBulk(c, "", 0);
        else addReplyBulk(c, c->argv[1], sdslen(c->argv[1]));
        return;
    }
    if (c->argc == 1) addReplyStatus(c, "PONG");
    else addReplyBulk(c, c->argv[1], sdslen(c->argv[1]));
}

void echoCommand(client *c) { addReplyBulk(c, c->argv[1], sdslen(c->argv[1])); }

void selectCommand(client *c) {
    long long id;
    if (getLongLongFromObjectOrReply(c, c->argv[1], &id, NULL) != C_OK) return;
    if (id != 0) {
        addReplyError(c, "ERR DB index is out of range");
        return;
    }
    addReplyOk(c);
}

/* One database, as SELECT says: SWAPDB 0 0 is the only swap there is, and
 * answers OK as Redis's does; any other index is out of range, with
 * Redis's words, so a script written for a 16-database Redis fails where
 * it would fail against `databases 1`. */
void swapdbCommand(client *c) {
    long long a, b;
    if (server.cluster_enabled) {
        addReplyError(c, "ERR SWAPDB is not allowed in cluster mode");
        return;
    }
    if (getLongLongFromObjectOrReply(c, c->argv[1], &a, "ERR invalid first DB index") != C_OK) return;
    if (getLongLongFromObjectOrReply(c, c->argv[2], &b, "ERR invalid second DB index") != C_OK) return;
    if (a != 0 || b != 0) {
        addReplyError(c, "ERR DB index is out of range");
        return;
    }
    addReplyOk(c);
}

/* There are no RDB snapshots: the append-only log is the persistence
 * (aof.c). LASTSAVE answers what INFO persistence's rdb_last_save_time
 * says -- the start, when the dataset was last whole on disk as far as a
 * snapshot goes -- so a monitor that polls either sees one value. SAVE and
 * BGSAVE are refused rather than mapped onto the log: a backup script that
 * runs BGSAVE then copies dump.rdb would find no file, long after an OK
 * told it the snapshot was taken; the refusal says what to use instead. */
void lastsaveCommand(client *c) { addReplyLongLong(c, (long long)(server.starttime_ms / 1000)); }

#define NO_RDB_ERR                                                                                      \
    " is not supported: there are no RDB snapshots; the append-only file is the persistence (CONFIG " \
    "SET appendonly yes, BGREWRITEAOF to rewrite it)"

void saveCommand(client *c) { addReplyError(c, "ERR SAVE" NO_RDB_ERR); }

/* MODULE: nothing is loadable yet (modules/README.md), so LIST is the
 * empty list -- what RedisInsight, redis-py's module_list() and the
 * RediSearch-detecting client libraries ask on connecting, and which tells
 * them plainly that no module is here -- and LOAD/LOADEX are refused in
 * words that say why; UNLOAD answers as Redis does for a name not loaded. */
void moduleCommand(client *c) {
    const char *sub = c->argv[1];
    if (!strcasecmp(sub, "help") && c->argc == 2) {
        static const char *help[] = {"LIST", "    Return a list of loaded modules (none can be loaded yet).", NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "list") && c->argc == 2) {
        addReplyArrayLen(c, 0);
    } else if ((!strcasecmp(sub, "load") || !strcasecmp(sub, "loadex")) && c->argc >= 3) {
        addReplyError(c, "ERR modules cannot be loaded: this server has no module interface yet (modules/README.md)");
    } else if (!strcasecmp(sub, "unload") && c->argc == 3) {
        addReplyError(c, "ERR Error unloading module: no such module with that name");
    } else {
        addReplySubcommandSyntaxError(c);
    }
}

/* SYNC asks for an RDB snapshot followed by the stream: what redis-cli
 * --rdb, --functions-rdb and --replica send. There is no snapshot to
 * send, so it is refused in words that say so, which redis-cli prints as
 * "SYNC with master failed: ..." and exits (it called SYNC unknown
 * before, which said nothing about why). Replicas here use PSYNC. */
void syncCommand(client *c) {
    addReplyError(c, "ERR SYNC is not supported: there are no RDB snapshots to send; the append-only file is the "
                     "persistence, and cluster-mode replicas sync with PSYNC");
}

void bgsaveCommand(client *c) {
    if (c->argc > 2 || (c->argc == 2 && strcasecmp(c->argv[1], "schedule"))) {
        addReplyErrorSyntax(c);
        return;
    }
    addReplyError(c, "ERR BGSAVE" NO_RDB_ERR);
}

void quitCommand(client *c) {
    addReplyOk(c);
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
}

/* The connection as a new one would be (Redis 7's clearClientConnectionState). */
void resetCommand(client *c) {
    monitorRemove(c);
    discardTransaction(c);
    pubsubUnsubscribeAll(c, 0); /* silently, as Redis */
    c->flags &= ~(CLIENT_ASKING | CLIENT_READONLY | CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP_NEXT | CLIENT_NO_TOUCH |
                  CLIENT_NO_EVICT);
    c->resp = 2;
    sdsfree(c->name);
    c->name = NULL;
    c->user = DefaultUser;
    aclClientCountAs(c, DefaultUser);
    c->authenticated = aclUserOpensWithoutAuth(DefaultUser);
    addReplyStatus(c, "RESET");
}

void timeCommand(client *c) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    addReplyArrayLen(c, 2);
    addReplyBulkLongLong(c, tv.tv_sec);
    addReplyBulkLongLong(c, tv.tv_usec);
}

void shutdownCommand(client *c) {
    int force = 0;
    for (int j = 1; j < c->argc; j++) {
        const char *o = c->argv[j];
        if (!strcasecmp(o, "abort")) {
            addReplyError(c, "ERR No shutdown in progress.");
            return;
        }
        if (strcasecmp(o, "nosave") && strcasecmp(o, "save") && strcasecmp(o, "now") &&
            strcasecmp(o, "force")) {
            addReplyErrorSyntax(c);
            return;
        }
        if (!strcasecmp(o, "force")) force = 1;
    }
    /* Shutting down is writing and syncing the log (if on) and closing the
     * doors. The client sees the connection close, as with Redis; or an
     * error, when the log cannot take what was acknowledged (FORCE: exit
     * anyway). */
    if (prepareForShutdown(force) != C_OK) {
        addReplyError(c, "ERR Errors trying to SHUTDOWN. Check logs.");
        return;
    }
    exit(0);
}

void debugCommand(client *c) {
    const char *sub = c->argv[1];
    if (!strcasecmp(sub, "help")) {
        static const char *help[] = {
            "SLEEP <seconds>", "    Stop the server for <seconds> (decimals allowed).",
            "ALLOC-CHECK", "    Check the consistency of the pool's allocator (O(n)).",
            "ZEROFREE PAUSE|RESUME|DRAIN", "    Hold, release or finish the zeroing of freed pool extents (tests).",
            "OBJECT <key>", "    Show low-level information about the key's value.",
            "AOF-WRITE-ERROR ENOSPC|EIO|OFF", "    Make the append-only log's writes fail (tests).",
            "AOF-FSYNC-ERROR EIO|OFF", "    Make the append-only log's background fsyncs fail (tests).",
            "AOF-REWRITE-DELAY <ms>", "    The next rewrites wait <ms> before each large value they copy (tests).",
            "VISITS [RESET]", "    Entries visited by the structures that grow with use, per structure.",
            "WALLCLOCK-STEP <ms>", "    Step the server's wall clock by <ms> (negative: back), as NTP would (tests).",
            "BUSYPOLL SAMPLE <runnable> <cpus> <wasted-us> <caught>",
            "    One busy-poll decision from these inputs (one second's); the cron's own steps stop (tests).",
            "BUSYPOLL AUTO", "    The cron decides from the host's load again.",
            "TENANT-CHECK", "    Recount the tenants' keys, charges and connections by a walk (O(n)); the differences.",
            NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "sleep") && c->argc == 3) {
        char *end;
        double secs = strtod(c->argv[2], &end);
        if (*end || !(secs >= 0 && secs <= 3600)) { /* also refuses NaN */
            addReplyError(c, "ERR value is not a valid float");
            return;
        }
        long long us = (long long)(secs * 1e6);
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&ts, NULL);
        addReplyOk(c);
    } else if (!strcasecmp(sub, "alloc-check") && c->argc == 2) {
        char err[256];
        if (allocCheck(server.self->alloc, err, sizeof(err)) == 0) addReplyOk(c);
        else addReplyErrorFormat(c, "ERR allocator inconsistent: %s", err);
    } else if (!strcasecmp(sub, "zerofree") && c->argc == 3) {
        const char *op = c->argv[2];
        if (!strcasecmp(op, "pause")) zerofreePause(1);
        else if (!strcasecmp(op, "resume")) zerofreePause(0);
        else if (!strcasecmp(op, "drain")) zerofreeReclaim(1);
        else {
            addReplySubcommandSyntaxError(c);
            return;
        }
        addReplyOk(c);
    } else if (!strcasecmp(sub, "aof-write-error") && c->argc == 3) {
        const char *e = c->argv[2];
        if (!strcasecmp(e, "enospc")) aofDebugWriteErrno = ENOSPC;
        else if (!strcasecmp(e, "eio")) aofDebugWriteErrno = EIO;
        else if (!strcasecmp(e, "off")) aofDebugWriteErrno = 0;
        else {
            addReplySubcommandSyntaxError(c);
            return;
        }
        addReplyOk(c);
    } else if (!strcasecmp(sub, "aof-fsync-error") && c->argc == 3) {
        const char *e = c->argv[2];
        if (!strcasecmp(e, "eio")) __atomic_store_n(&aofDebugFsyncErrno, EIO, __ATOMIC_RELAXED);
        else if (!strcasecmp(e, "off")) __atomic_store_n(&aofDebugFsyncErrno, 0, __ATOMIC_RELAXED);
        else {
            addReplySubcommandSyntaxError(c);
            return;
        }
        addReplyOk(c);
    } else if (!strcasecmp(sub, "aof-rewrite-delay") && c->argc == 3) {
        long long ms;
        if (!string2ll(c->argv[2], sdslen(c->argv[2]), &ms) || ms < 0 || ms > 60000) {
            addReplyError(c, "ERR milliseconds must be an integer from 0 to 60000");
            return;
        }
        aofDebugRewriteDelayMs = (int)ms;
        addReplyOk(c);
    } else if (!strcasecmp(sub, "wallclock-step") && c->argc == 3) {
        /* Only the wall clock moves: key expiries see the step, relative
         * timeouts (server.monotime) must not. */
        long long ms;
        if (!string2ll(c->argv[2], sdslen(c->argv[2]), &ms) || ms < -1000000000000LL || ms > 1000000000000LL) {
            addReplyError(c, "ERR milliseconds must be an integer from -1000000000000 to 1000000000000");
            return;
        }
        wallClockOffsetUs += ms * 1000;
        updateCachedTime();
        addReplyOk(c);
    } else if (!strcasecmp(sub, "visits") && (c->argc == 2 || (c->argc == 3 && !strcasecmp(c->argv[2], "reset")))) {
        /* Counted since start (or the last RESET); see VISITS_* in server.h. */
        static const char *names[VISITS_KINDS] = {"leases", "deferred", "deferred-sweep", "watched-keys", "pubsub",
                                                  "owner-segments", "querybuf-moved",
                                                  "client-owners", "segments", "cron-ticks",
                                                  "cron-segments", "cron-owners", "clients-by-id", "expire",
                                                  "paused", "tenant-evict", "auth-digests"};
        if (c->argc == 3) {
            memset(server.visits, 0, sizeof(server.visits));
            addReplyOk(c);
            return;
        }
        addReplyMapLen(c, VISITS_KINDS);
        for (int i = 0; i < VISITS_KINDS; i++) {
            addReplyBulkCString(c, names[i]);
            addReplyLongLong(c, server.visits[i]);
        }
    } else if (!strcasecmp(sub, "busypoll") && c->argc == 7 && !strcasecmp(c->argv[2], "sample")) {
        char *end;
        double runnable = strtod(c->argv[3], &end);
        long long cpus, wasted, caught;
        if (*end || !(runnable >= 0 && runnable <= 1e6) || string2ll(c->argv[4], sdslen(c->argv[4]), &cpus) == 0 ||
            cpus < 1 || cpus > 1000000 || string2ll(c->argv[5], sdslen(c->argv[5]), &wasted) == 0 || wasted < 0 ||
            wasted > 1000000 || string2ll(c->argv[6], sdslen(c->argv[6]), &caught) == 0 || caught < 0) {
            addReplyError(c, "ERR value is out of range");
            return;
        }
        bp.manual = 1;
        busyPollStep(runnable, (int)cpus, wasted, caught, 1000000);
        addReplyOk(c);
    } else if (!strcasecmp(sub, "busypoll") && c->argc == 3 && !strcasecmp(c->argv[2], "auto")) {
        bp.manual = 0;
        bp.sum = 0;
        bp.samples = 0;
        bp.last_step_us = 0;
        addReplyOk(c);
    } else if (!strcasecmp(sub, "tenant-check") && c->argc == 2) {
        /* An empty array: every counter matches its recount. */
        size_t n = 0;
        sds *diffs = tenantKeysCheck(NULL, &n);
        diffs = aclCheckClientCounts(diffs, &n);
        addReplyArrayLen(c, (long)n);
        for (size_t i = 0; i < n; i++) addReplyBulkSds(c, diffs[i]);
        zfree(diffs);
    } else if (!strcasecmp(sub, "object") && c->argc == 3) {
        storeObj *o = storeLookupWrite(c->argv[2]);
        if (!o) {
            addReplyError(c, "ERR no such key");
            return;
        }
        storeObjLiveReplicas(o);
        segment *seg = o->nreplicas ? storeReplicaSegment(&o->r) : server.self;
        sds s = sdscatprintf(sdsempty(),
                             "Value at:%p refcount:%u encoding:%s serializedlength:%llu "
                             "lru:%u replicas:%d segment:%llu offset:%llu reserved:%llu",
                             (void *)storeObjLocalPtr(o), o->refcount, storeObjEncoding(o), (unsigned long long)o->len, o->lru,
                             o->nreplicas, (unsigned long long)seg->id, (unsigned long long)o->r.offset,
                             (unsigned long long)(o->nreplicas ? allocSize(seg->alloc, o->r.handle) : 0));
        addReplyStatus(c, s);
        sdsfree(s);
    } else {
        addReplySubcommandSyntaxError(c);
    }
}

/* ---- main ---------------------------------------------------------------- */

/* The sample configuration that goes with this binary, found from where the
 * binary is rather than from a path compiled in: `make install` puts it in
 * PREFIX/etc/mooncake/ beside PREFIX/bin/, and in the source tree it sits one
 * level above src/. So the help names the file that exists, whatever PREFIX
 * the install used and wherever the tree was moved. NULL if neither is. */
static const char *sampleConfigPath(char *buf, size_t len) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    for (int up = 0; up < 2; up++) { /* .../bin/mooncake-server -> ... */
        char *slash = strrchr(exe, '/');
        if (slash == NULL) return NULL;
        *slash = '\0';
    }
    static const char *const rel[] = {"/etc/mooncake/mooncake.conf", "/mooncake.conf"};
    for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        snprintf(buf, len, "%s%s", exe, rel[i]); /* exe "" for /bin: "/etc/..." */
        if (access(buf, R_OK) == 0) return buf;
    }
    return NULL;
}

static void usage(void) {
    char buf[PATH_MAX + 64];
    const char *sample = sampleConfigPath(buf, sizeof(buf));
    fprintf(stderr,
            "Usage: mooncake-server [/path/to/mooncake.conf] [options] [-]\n"
            "       mooncake-server - (read config from stdin)\n"
            "       mooncake-server -v or --version\n"
            "       mooncake-server -h or --help\n\n"
            "Examples:\n"
            "       mooncake-server (run the server with default config)\n"
            "       mooncake-server %s\n"
            "       mooncake-server --port 7777\n"
            "       mooncake-server %s --segment-size 4gb --loglevel verbose\n\n",
            sample ? sample : "/path/to/mooncake.conf", sample ? sample : "/path/to/mooncake.conf");
    if (sample)
        fprintf(stderr, "The sample configuration, every directive with its default: %s\n", sample);
    else
        fprintf(stderr, "The sample configuration, every directive with its default, is mooncake.conf in\n"
                        "the source tree; `make install` puts it in PREFIX/etc/mooncake/mooncake.conf.\n");
    exit(1);
}

int main(int argc, char **argv) {
    char err[512];
    uint8_t seed[16];
    getRandomBytes(seed, sizeof(seed));
    dictSetHashSeed(seed);
    /* The command table first: the default user's permissions cover every
     * command, and requirepass (a config) is the default user's password. */
    populateCommandTable();
    aclInit();
    initConfigValues();

    const char *configfile = NULL;
    int j = 1;
    if (argc >= 2) {
        if (!strcmp(argv[1], "-v") || !strcmp(argv[1], "--version")) {
            printf("Mooncake server v=%s (redis-compat %s) malloc=%s bits=%d\n", MOONCAKE_VERSION,
                   REDIS_COMPAT_VERSION, zmalloc_lib(), (int)(sizeof(long) * 8));
            return 0;
        }
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) usage();
        if (argv[1][0] != '-' || !strcmp(argv[1], "-")) {
            configfile = argv[1];
            j = 2;
        }
    }
    server.executable = argv[0];
    if (loadServerConfig(configfile, argc - j, argv + j, err, sizeof(err)) != C_OK) {
        fprintf(stderr, "\n*** FATAL CONFIG FILE ERROR (Mooncake %s) ***\n%s\n", MOONCAKE_VERSION, err);
        return 1;
    }
    if (aclLoadConfiguredFile(err, sizeof(err)) != C_OK) {
        fprintf(stderr, "\n*** FATAL ACL FILE ERROR (Mooncake %s) ***\n%s\n", MOONCAKE_VERSION, err);
        return 1;
    }
    if (server.daemonize) daemonize();
    serverLog(LL_WARNING, "oO0OoO0OoO0Oo Mooncake is starting oO0OoO0OoO0Oo");
    serverLog(LL_WARNING, "Mooncake version=%s, bits=%d, pid=%d, just started", MOONCAKE_VERSION,
              (int)(sizeof(long) * 8), (int)getpid());
    if (configfile == NULL)
        serverLog(LL_WARNING, "Warning: no config file specified, using the default config. In "
                              "order to specify a config file use %s /path/to/mooncake.conf", argv[0]);
    else
        serverLog(LL_WARNING, "Configuration loaded from %s (CONFIG REWRITE writes there)",
                  server.configfile ? server.configfile : configfile);
    initServer();
    createPidFile();
    char sz[32];
    bytesToHuman(sz, sizeof(sz), (unsigned long long)server.segment_size);
    char pages[256] = "";
    if (server.self) segmentDescribePages(server.self, pages, sizeof(pages));
    serverLog(LL_NOTICE, "Pool: segment 'self' of %s, %s%s", sz, pages,
              server.segment_prefault ? ", pre-faulting in the background" : "");
    serverLog(LL_NOTICE, "Server initialized, listening on port %d%s%s", server.port,
              server.sofd != -1 ? " and unix socket " : "", server.sofd != -1 ? server.unixsocket : "");
    server.startup_heap = zmalloc_used_memory();
    serverLog(LL_NOTICE, "Ready to accept connections");
    aeMain(server.el);
    aeDeleteEventLoop(server.el);
    return 0;
}
