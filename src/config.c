/* config.c -- table-driven configuration.
 *
 * One row per directive: its type (bool, integer, memory size, double,
 * enum, string, or special with its own parser), bounds, default, flags and
 * an optional apply hook. From that single table come: the defaults, the
 * mooncake.conf parser, `--directive value` command-line overrides,
 * CONFIG GET (with glob patterns), CONFIG SET (atomic over several
 * parameters: all are validated and applied, or none), CONFIG REWRITE, and
 * the names INFO can report. A directive cannot drift out of sync between
 * those paths because there is only one description of it.
 *
 * Errors name the file, the line, the line itself and the reason, as Redis
 * does, so a typo stops start-up with a message a person can act on.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "acl.h"
#include "aof.h"
#include "anet.h"
#include "cluster.h"
#include "http.h"
#include "notify.h"
#include "replication.h"
#include "segment.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

enum { CFG_BOOL, CFG_INT, CFG_MEM, CFG_DOUBLE, CFG_ENUM, CFG_STRING, CFG_SPECIAL };

#define CFG_IMMUTABLE (1 << 0)
#define CFG_OCTAL (1 << 1)     /* integer printed and parsed in base 8 */
#define CFG_ONEARG (1 << 2)    /* special taking one argument that may contain spaces */
#define CFG_PROTECTED (1 << 3) /* CONFIG SET only as enable-protected-configs allows */
#define CFG_BINARY (1 << 4)    /* the value may hold zero bytes (passwords) */
#define CFG_APPLY_LAST (1 << 5) /* apply hook an undo cannot take back: run after the others */
#define CFG_APPLY_MAY_REFUSE (1 << 6) /* CFG_APPLY_LAST whose hook may refuse: first among those */
#define CFG_SECRET (1 << 7)    /* a password: CONFIG GET leaves it out for a tenant (configGetCommand) */

typedef struct configEnum {
    const char *name;
    int value;
} configEnum;

typedef struct standardConfig {
    const char *name;
    int type;
    int flags;
    void *ptr;              /* long long*, int*, double*, char** */
    long long lower, upper; /* integers and memory sizes */
    double dlower, dupper;  /* doubles */
    const char *deflt;
    const configEnum *enums;
    int (*apply)(const char **err);
    int (*setSpecial)(sds *argv, int argc, const char **err);
    sds (*getSpecial)(void);
} standardConfig;

static const configEnum loglevelEnum[] = {
    {"debug", LL_DEBUG}, {"verbose", LL_VERBOSE}, {"notice", LL_NOTICE}, {"warning", LL_WARNING}, {NULL, 0}};
/* enable-protected-configs, as Redis 7: no, yes, or local (unix socket and
 * loopback connections only). */
enum { PROTECTED_NO = 0, PROTECTED_YES = 1, PROTECTED_LOCAL = 2 };
static const configEnum protectedEnum[] = {
    {"no", PROTECTED_NO}, {"yes", PROTECTED_YES}, {"local", PROTECTED_LOCAL}, {NULL, 0}};
static const configEnum evictPolicyEnum[] = {{"lru", EVICT_LRU}, {"noeviction", EVICT_NOEVICTION}, {NULL, 0}};
static const configEnum aofFsyncEnum[] = {
    /* Redis's order: its error message lists the values in it. */
    {"everysec", AOF_FSYNC_EVERYSEC}, {"always", AOF_FSYNC_ALWAYS}, {"no", AOF_FSYNC_NO}, {NULL, 0}};
static const configEnum placementEnum[] = {
    {"random", PLACE_RANDOM}, {"free-ratio", PLACE_FREE_RATIO}, {"local-first", PLACE_LOCAL_FIRST}, {NULL, 0}};

/* ---- special directives -------------------------------------------------- */

static int setBind(sds *argv, int argc, const char **err) {
    if (argc > CONFIG_BINDADDR_MAX) {
        *err = "Too many bind addresses specified.";
        return C_ERR;
    }
    if (argc == 0) { /* `bind " "`: blanks split into no word; only "" means no TCP listener */
        *err = "Invalid bind address: a host name or IP address, printable and without quotes";
        return C_ERR;
    }
    /* `bind ""` means no TCP listener at all (unix socket only). Otherwise
     * each word is an address: printable, no quote (CONFIG GET and REWRITE
     * join the words with spaces as they are, so one that held a space, a
     * quote or nothing at all would not read back as itself -- found by
     * fuzzing: `bind 10.0.0.1 ""` was taken, and rewritten as one address). */
    int none = argc == 1 && sdslen(argv[0]) == 0;
    for (int j = 0; j < argc && !none; j++) {
        int ok = sdslen(argv[j]) > 0;
        for (size_t i = 0; i < sdslen(argv[j]) && ok; i++) {
            unsigned char ch = (unsigned char)argv[j][i];
            ok = ch > ' ' && ch <= '~' && ch != '"' && ch != '\'';
        }
        if (!ok) {
            *err = "Invalid bind address: a host name or IP address, printable and without quotes";
            return C_ERR;
        }
    }
    for (int j = 0; j < server.bindaddr_count; j++) zfree(server.bindaddr[j]);
    server.bindaddr_count = 0;
    if (none) return C_OK;
    for (int j = 0; j < argc; j++) server.bindaddr[server.bindaddr_count++] = zstrdup(argv[j]);
    return C_OK;
}

/* http-bind: checked when it is set, as bind is (Redis refuses a bad bind
 * at CONFIG SET), not only when a listener is wanted -- with http-port 0,
 * `http-bind abc` was taken and failed later, at the CONFIG SET of a port,
 * naming the address the caller had set long before. The same test the
 * listener applies: "*", "::*" or a numeric address (anetTcpServer). */
static int setHttpBind(sds *argv, int argc, const char **err) {
    static char msg[ANET_ERR_LEN + 128];
    char aerr[ANET_ERR_LEN] = "";
    if (argc != 1) {
        *err = "wrong number of arguments";
        return C_ERR;
    }
    if (sdslen(argv[0]) == 0 || anetTcpBindAddrValid(aerr, argv[0]) != ANET_OK) {
        snprintf(msg, sizeof(msg), "Invalid http-bind address: a numeric IPv4 or IPv6 address, or \"*\" (%s)",
                 aerr[0] ? aerr : "empty");
        *err = msg;
        return C_ERR;
    }
    zfree(server.http_bind);
    server.http_bind = zstrdup(argv[0]);
    return C_OK;
}

static sds getHttpBind(void) { return sdsnew(server.http_bind ? server.http_bind : ""); }

static sds getBind(void) {
    sds s = sdsempty();
    for (int j = 0; j < server.bindaddr_count; j++) {
        if (j) s = sdscat(s, " ");
        s = sdscat(s, server.bindaddr[j]);
    }
    return s;
}

/* "<class> <hard> <soft> <seconds>" groups, as Redis writes them. The
 * classes are Redis's: normal, replica (alias slave: links to replicas,
 * by what they are behind, replication.c) and pubsub, which also bounds
 * MONITOR clients (monitor.c says why). */
static int cobClass(const char *name) {
    if (!strcasecmp(name, "normal")) return COB_NORMAL;
    if (!strcasecmp(name, "replica") || !strcasecmp(name, "slave")) return COB_REPLICA;
    if (!strcasecmp(name, "pubsub")) return COB_PUBSUB;
    return -1;
}

static int setCob(sds *argv, int argc, const char **err) {
    if (argc % 4 != 0) {
        *err = "Wrong number of arguments in buffer limit configuration.";
        return C_ERR;
    }
    /* Two passes: every group is validated before any is applied, so a
     * refused value changes nothing. */
    for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < argc; j += 4) {
        int class = cobClass(argv[j]);
        if (class < 0) {
            *err = "Invalid client class specified in buffer limit configuration.";
            return C_ERR;
        }
        int e1, e2;
        long long hard = memtoll(argv[j + 1], &e1), soft = memtoll(argv[j + 2], &e2);
        long long secs;
        if (e1 || e2 || hard < 0 || soft < 0 || !string2ll(argv[j + 3], sdslen(argv[j + 3]), &secs) || secs < 0) {
            *err = "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
            return C_ERR;
        }
        if (pass == 1) {
            server.cob[class].hard = (unsigned long long)hard;
            server.cob[class].soft = (unsigned long long)soft;
            server.cob[class].soft_seconds = secs;
        }
    }
    return C_OK;
}

/* As Redis 7.0 shows it, bytes and the class name "slave" included. */
static sds getCob(void) {
    static const char *names[COB_CLASSES] = {"normal", "slave", "pubsub"};
    sds s = sdsempty();
    for (int i = 0; i < COB_CLASSES; i++)
        s = sdscatprintf(s, "%s%s %llu %llu %lld", i ? " " : "", names[i], server.cob[i].hard, server.cob[i].soft,
                         server.cob[i].soft_seconds);
    return s;
}

/* notify-keyspace-events: Redis's letters and S (notify.c). */
static int setNotify(sds *argv, int argc, const char **err) {
    int flags = argc == 1 ? notifyFlagsFromString(argv[0]) : -1;
    if (flags == -1) {
        *err = "Invalid event class character. Use 'Ag$lshzxeKEtmdnS'.";
        return C_ERR;
    }
    notifySetFlags(flags);
    return C_OK;
}

static sds getNotify(void) { return notifyFlagsToString(server.notify_keyspace_events); }

/* Persistence directives from redis.conf are accepted so redis.conf-shaped
 * files and tools that probe them (redis-benchmark reads `save` and
 * `appendonly`) work, but only with the values that mean "nothing is
 * persisted": the pool is a cache. */
static int setSave(sds *argv, int argc, const char **err) {
    if (argc == 1 && sdslen(argv[0]) == 0) return C_OK;
    *err = "Mooncake persists nothing: only save \"\" is accepted";
    return C_ERR;
}

static sds getSave(void) { return sdsempty(); }


/* "auto": same-host clients get a window-only algorithm when the system
 * default paces (anet.c says why); "system": the default for everyone; a
 * name: that algorithm for every TCP client, refused unless this process may
 * set it. */
static int setTcpCongestion(sds *argv, int argc, const char **err) {
    static char msg[ANET_ERR_LEN + 64];
    if (argc != 1 || sdslen(argv[0]) == 0) {
        *err = "argument must be 'auto', 'system' or an algorithm name";
        return C_ERR;
    }
    if (strcasecmp(argv[0], "auto") && strcasecmp(argv[0], "system")) {
        char aerr[ANET_ERR_LEN];
        if (sdslen(argv[0]) >= sizeof(server.tcp_congestion) ||
            anetCongestionAvailable(aerr, argv[0]) != ANET_OK) {
            snprintf(msg, sizeof(msg), "congestion control '%.32s' can't be used here (see "
                     "net.ipv4.tcp_available_congestion_control)", argv[0]);
            *err = msg;
            return C_ERR;
        }
    }
    const char *v = !strcasecmp(argv[0], "auto") ? "auto" : !strcasecmp(argv[0], "system") ? "system" : argv[0];
    snprintf(server.tcp_congestion, sizeof(server.tcp_congestion), "%s", v);
    return C_OK;
}

static sds getTcpCongestion(void) { return sdsnew(server.tcp_congestion); }

/* maxmemory-policy is Redis's name for evict-policy, so redis.conf files
 * and tools that set it work: allkeys-lru is our lru (approximate LRU over
 * all keys, honouring leases and pins); the volatile and LFU policies have
 * no counterpart here and are refused rather than quietly mapped. */
static int setMaxmemoryPolicy(sds *argv, int argc, const char **err) {
    if (argc != 1) {
        *err = "wrong number of arguments";
        return C_ERR;
    }
    if (!strcasecmp(argv[0], "allkeys-lru")) server.evict_policy = EVICT_LRU;
    else if (!strcasecmp(argv[0], "noeviction")) server.evict_policy = EVICT_NOEVICTION;
    else {
        *err = "supported policies are allkeys-lru and noeviction (evict-policy lru|noeviction)";
        return C_ERR;
    }
    return C_OK;
}

static sds getMaxmemoryPolicy(void) {
    return sdsnew(server.evict_policy == EVICT_LRU ? "allkeys-lru" : "noeviction");
}

/* The password is binary-safe: kept as an sds, so "abc\0def" is seven
 * bytes and AUTH abc is refused (a C string would end at the zero). It is
 * the default user's password, as in Redis 7: setting it is
 * ACL SETUSER default resetpass >pass (nopass when empty). The value here
 * is what CONFIG GET and REWRITE show; ACL SETUSER default does not change
 * it, as in Redis. */
static int setRequirepass(sds *argv, int argc, const char **err) {
    if (argc != 1) {
        *err = "wrong number of arguments";
        return C_ERR;
    }
    sdsfree(server.requirepass);
    server.requirepass = sdslen(argv[0]) ? sdsdup(argv[0]) : NULL;
    aclUpdateDefaultUserPassword(server.requirepass);
    return C_OK;
}

static sds getRequirepass(void) { return server.requirepass ? sdsdup(server.requirepass) : sdsempty(); }

/* The password a replica gives its primary (replication_replica.c), binary-safe
 * as requirepass and shown by CONFIG GET as requirepass is (as Redis
 * does); SLOWLOG shows CONFIG SET's value of either as "(redacted)". */
static int setMasterauth(sds *argv, int argc, const char **err) {
    if (argc != 1) {
        *err = "wrong number of arguments";
        return C_ERR;
    }
    sdsfree(server.masterauth);
    server.masterauth = sdslen(argv[0]) ? sdsdup(argv[0]) : NULL;
    return C_OK;
}

static sds getMasterauth(void) { return server.masterauth ? sdsdup(server.masterauth) : sdsempty(); }

/* latency-tracking-info-percentiles "50 99 99.9": what INFO latencystats
 * reports, each 0..100, at most 16. */
static int setLatencyPercentiles(sds *argv, int argc, const char **err) {
    double v[16];
    int n = 0;
    /* Given as one quoted word ("50 99 99.9", the config file) or several.
     * Split at each single space as Redis does, so a leading, trailing or
     * doubled space leaves an empty word, which is not a number; an empty
     * value is no percentiles. */
    for (int i = 0; i < argc; i++) {
        const char *p = argv[i];
        if (!*p) continue;
        for (;;) {
            const char *sp = strchr(p, ' ');
            size_t wl = sp ? (size_t)(sp - p) : strlen(p);
            char word[64], *end;
            double d = 0;
            int ok = wl > 0 && wl < sizeof(word);
            if (ok) {
                memcpy(word, p, wl);
                word[wl] = '\0';
                errno = 0;
                d = strtod(word, &end);
                ok = !isspace((unsigned char)word[0]) && *end == '\0' && errno != ERANGE && d == d;
            }
            /* Redis's two messages: not a number, then out of range. */
            if (!ok) {
                *err = "Invalid latency-tracking-info-percentiles parameters";
                return C_ERR;
            }
            if (!(d >= 0.0 && d <= 100.0)) {
                *err = "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]";
                return C_ERR;
            }
            if (n == 16) {
                *err = "at most 16 percentiles";
                return C_ERR;
            }
            v[n++] = d;
            if (!sp) break;
            p = sp + 1;
        }
    }
    memcpy(server.latency_percentiles, v, sizeof(double) * (size_t)n);
    server.latency_npercentiles = n;
    return C_OK;
}

static sds getLatencyPercentiles(void) {
    sds s = sdsempty();
    for (int i = 0; i < server.latency_npercentiles; i++)
        s = sdscatdouble(i ? sdscat(s, " ") : s, server.latency_percentiles[i]);
    return s;
}

static int setDir(sds *argv, int argc, const char **err) {
    if (argc != 1) {
        *err = "wrong number of arguments";
        return C_ERR;
    }
    if (chdir(argv[0]) == -1) {
        *err = strerror(errno);
        return C_ERR;
    }
    return C_OK;
}

static sds getDir(void) {
    char buf[4096];
    return sdsnew(getcwd(buf, sizeof(buf)) ? buf : "");
}

/* ---- apply hooks ---------------------------------------------------------- */

/* maxclients, http-maxclients, remote-get-max-inflight: each holds
 * descriptors; server.c owns the count and what it takes. */
static int applyMaxclients(const char **err) { return serverApplyFdLimits(err); }

static int applyBusyPoll(const char **err) {
    (void)err;
    if (server.el) aeSetBusyPoll(server.el, server.busy_poll_us);
    busyPollConfigChanged();
    return C_OK;
}

static int applyFullCoverage(const char **err) {
    (void)err;
    if (server.cluster) clusterRebuild();
    return C_OK;
}

/* maxmemory: the rule and its effect belong to the store (storeMaxmemoryInvalid,
 * storeApplyMaxmemory); at start-up storeInit checks and applies it. */
static int applyMaxmemory(const char **err) {
    if (server.self == NULL) return C_OK; /* start-up: storeInit checks and applies it */
    if ((*err = storeMaxmemoryInvalid(server.maxmemory)) != NULL) return C_ERR;
    storeApplyMaxmemory();
    return C_OK;
}

static int applyAclLogMaxLen(const char **err) {
    (void)err;
    aclApplyLogMaxLen();
    return C_OK;
}

/* Every http-* directive: the listener is made to match, or CONFIG SET
 * fails changing nothing (http.c starts the new one before stopping the
 * old). Idempotent, so setting several http-* at once rebinds once. */
static int applyHttp(const char **err) { return httpApplyConfig(err); }

/* More HTTP connections need descriptors as more clients do. */
static int applyHttpMaxclients(const char **err) {
    if (applyMaxclients(err) != C_OK) return C_ERR;
    return applyHttp(err);
}

static int applyBacklogSize(const char **err) {
    (void)err;
    replResizeBacklog();
    return C_OK;
}

static int applyLoglevel(const char **err) {
    (void)err;
    return C_OK;
}

/* ---- the table ----------------------------------------------------------- */

#define BOOLC(n, f, p, d) {n, CFG_BOOL, f, p, 0, 1, 0, 0, d, NULL, NULL, NULL, NULL}
#define BOOLCA(n, f, p, d, ap) {n, CFG_BOOL, f, p, 0, 1, 0, 0, d, NULL, ap, NULL, NULL}
#define INTC(n, f, p, lo, hi, d, ap) {n, CFG_INT, f, p, lo, hi, 0, 0, d, NULL, ap, NULL, NULL}
#define MEMC(n, f, p, lo, hi, d) {n, CFG_MEM, f, p, lo, hi, 0, 0, d, NULL, NULL, NULL, NULL}
#define MEMCA(n, f, p, lo, hi, d, ap) {n, CFG_MEM, f, p, lo, hi, 0, 0, d, NULL, ap, NULL, NULL}
#define DBLC(n, f, p, lo, hi, d) {n, CFG_DOUBLE, f, p, 0, 0, lo, hi, d, NULL, NULL, NULL, NULL}
#define ENUMC(n, f, p, e, d, ap) {n, CFG_ENUM, f, p, 0, 0, 0, 0, d, e, ap, NULL, NULL}
#define STRC(n, f, p, d) {n, CFG_STRING, f, p, 0, 0, 0, 0, d, NULL, NULL, NULL, NULL}
#define STRCA(n, f, p, d, ap) {n, CFG_STRING, f, p, 0, 0, 0, 0, d, NULL, ap, NULL, NULL}
#define SPECC(n, f, d, set, get) {n, CFG_SPECIAL, f, NULL, 0, 0, 0, 0, d, NULL, NULL, set, get}

static long long cfg_port, cfg_tcp_backlog, cfg_unixsocketperm, cfg_databases;

static standardConfig configs[] = {
    /* Network */
    INTC("port", CFG_IMMUTABLE, &cfg_port, 0, 65535, "6379", NULL),
    SPECC("bind", CFG_IMMUTABLE, "127.0.0.1 -::1", setBind, getBind),
    STRC("unixsocket", CFG_IMMUTABLE, &server.unixsocket, ""),
    INTC("unixsocketperm", CFG_IMMUTABLE | CFG_OCTAL, &cfg_unixsocketperm, 0, 0777, "0", NULL),
    INTC("tcp-backlog", CFG_IMMUTABLE, &cfg_tcp_backlog, 0, INT_MAX, "511", NULL),
    BOOLC("protected-mode", 0, &server.protected_mode, "yes"),
    SPECC("requirepass", CFG_ONEARG | CFG_BINARY | CFG_SECRET, "", setRequirepass, getRequirepass),
    STRC("aclfile", CFG_IMMUTABLE, &server.acl_filename, ""),
    INTC("acllog-max-len", CFG_APPLY_LAST, &server.acllog_max_len, 0, LONG_MAX, "128", applyAclLogMaxLen),
    INTC("maxclients", 0, &server.maxclients, 1, 1000000, "10000", applyMaxclients),
    INTC("timeout", 0, &server.maxidletime, 0, INT_MAX, "0", NULL),
    INTC("tcp-keepalive", 0, &server.tcpkeepalive, 0, INT_MAX, "300", NULL),
    SPECC("tcp-congestion", 0, "auto", setTcpCongestion, getTcpCongestion),
    MEMC("tcp-notsent-lowat", 0, &server.tcp_notsent_lowat, 0, INT_MAX, "16kb"),
    MEMC("proto-max-bulk-len", 0, &server.proto_max_bulk_len, 1024 * 1024, LLONG_MAX, "1gb"),
    MEMC("client-query-buffer-limit", 0, &server.client_max_querybuf_len, 1024 * 1024, LLONG_MAX, "1gb"),
    MEMC("client-reply-pause-limit", 0, &server.client_reply_pause_limit, 0, LLONG_MAX, "64mb"),
    SPECC("client-output-buffer-limit", 0, "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60", setCob, getCob),
    SPECC("notify-keyspace-events", CFG_ONEARG, "", setNotify, getNotify),
    /* HTTP endpoints (http.c) */
    INTC("http-port", 0, &server.http_port, 0, 65535, "0", applyHttp),
    {"http-bind", CFG_SPECIAL, CFG_ONEARG, NULL, 0, 0, 0, 0, "127.0.0.1", NULL, applyHttp, setHttpBind, getHttpBind},
    INTC("http-maxclients", 0, &server.http_maxclients, 1, 10000, "128", applyHttpMaxclients),
    INTC("http-timeout", 0, &server.http_timeout, 1, 86400, "30", applyHttp),
    MEMCA("http-max-request-size", 0, &server.http_max_request_size, 4096, 1024 * 1024, "32kb", applyHttp),
    /* Process */
    BOOLC("daemonize", CFG_IMMUTABLE, &server.daemonize, "no"),
    STRC("pidfile", CFG_IMMUTABLE, &server.pidfile, ""),
    STRC("logfile", CFG_IMMUTABLE, &server.logfile, ""),
    ENUMC("loglevel", 0, &server.verbosity, loglevelEnum, "notice", applyLoglevel),
    /* Where relative paths lead (ACL SAVE's aclfile, CONFIG REWRITE, the
     * cluster config): protected, as Redis 7 protects it. The other path
     * directives (aclfile, pidfile, logfile, unixsocket, cluster-config-file)
     * are immutable. */
    SPECC("dir", CFG_ONEARG | CFG_PROTECTED, ".", setDir, getDir),
    ENUMC("enable-protected-configs", CFG_IMMUTABLE, &server.enable_protected_configs, protectedEnum, "no", NULL),
    INTC("hz", 0, &server.hz, 1, 500, "10", NULL),
    INTC("busy-poll-us", 0, &server.busy_poll_us, 0, 1000000, "50", applyBusyPoll),
    BOOLC("busy-poll-auto", 0, &server.busy_poll_auto, "yes"),
    INTC("prefetch-batch", 0, &server.prefetch_batch, 0, 16, "16", NULL),
    SPECC("save", 0, "", setSave, getSave),
    /* One database (SELECT 0): shown, as tools size their database pickers
     * by CONFIG GET databases, and 1 is the only value a file may give. */
    INTC("databases", CFG_IMMUTABLE, &cfg_databases, 1, 1, "1", NULL),
    /* The append-only log (aof.c) */
    BOOLCA("appendonly", CFG_APPLY_LAST | CFG_APPLY_MAY_REFUSE, &server.aof_enabled, "no", aofApplyConfig),
    ENUMC("appendfsync", 0, &server.aof_fsync, aofFsyncEnum, "everysec", NULL),
    STRC("appenddirname", CFG_IMMUTABLE, &server.aof_dirname, "appendonlydir"),
    STRC("appendfilename", CFG_IMMUTABLE, &server.aof_filename, "appendonly.aof"),
    BOOLC("aof-load-truncated", 0, &server.aof_load_truncated, "yes"),
    INTC("auto-aof-rewrite-percentage", 0, &server.auto_aof_rewrite_percentage, 0, INT_MAX, "100", NULL),
    MEMC("auto-aof-rewrite-min-size", 0, &server.auto_aof_rewrite_min_size, 0, LLONG_MAX, "64mb"),
    /* Slow log */
    INTC("slowlog-log-slower-than", 0, &server.slowlog_log_slower_than, -1, LLONG_MAX, "10000", NULL),
    INTC("slowlog-max-len", 0, &server.slowlog_max_len, 0, LONG_MAX, "128", NULL),
    INTC("latency-monitor-threshold", 0, &server.latency_monitor_threshold, 0, LLONG_MAX, "0", NULL),
    /* The pool (segment 'self') */
    MEMC("segment-size", CFG_IMMUTABLE, &server.segment_size, 1024 * 1024, LLONG_MAX, "1gb"),
    BOOLC("segment-hugepages", CFG_IMMUTABLE, &server.segment_hugepages, "no"),
    INTC("segment-numa-node", CFG_IMMUTABLE, &server.segment_numa_node, -1, 1023, "-1", NULL),
    BOOLC("segment-prefault", CFG_IMMUTABLE, &server.segment_prefault, "yes"),
    MEMC("max-key-size", 0, &server.max_key_size, 1, 512 * 1024 * 1024, "4096"),
    MEMC("max-object-size", 0, &server.max_object_size, 1, LLONG_MAX, "1gb"),
    MEMC("zero-free-async-threshold", 0, &server.zero_free_async_threshold, 0, LLONG_MAX, "256kb"),
    /* Eviction */
    DBLC("evict-high-watermark", 0, &server.evict_high_watermark, 0.01, 1.0, "0.90"),
    DBLC("evict-ratio", 0, &server.evict_ratio, 0.0, 1.0, "0.05"),
    ENUMC("evict-policy", 0, &server.evict_policy, evictPolicyEnum, "lru", NULL),
    SPECC("maxmemory-policy", 0, "allkeys-lru", setMaxmemoryPolicy, getMaxmemoryPolicy),
    BOOLC("latency-tracking", 0, &server.latency_tracking, "yes"),
    /* One argument, split by the setter at single spaces as Redis splits it. */
    SPECC("latency-tracking-info-percentiles", CFG_ONEARG, "50 99 99.9", setLatencyPercentiles, getLatencyPercentiles),
    MEMCA("maxmemory", 0, &server.maxmemory, 0, LLONG_MAX, "0", applyMaxmemory),
    INTC("evict-samples", 0, &server.evict_samples, 1, 64, "5", NULL),
    /* Segments and owners */
    INTC("owner-ttl", 0, &server.owner_ttl, 0, LLONG_MAX, "10000", NULL),
    INTC("owner-probe-timeout", 0, &server.owner_probe_timeout, 0, 3600000, "1000", NULL),
    INTC("max-segments", 0, &server.max_segments, 1, SEGMENT_MAX_SLOTS, "65535", NULL),
    INTC("tenant-max-segments", 0, &server.tenant_max_segments, 0, SEGMENT_MAX_SLOTS, "1024", NULL),
    MEMCA("tenant-maxmemory", 0, &server.tenant_maxmemory, 0, LLONG_MAX, "0", NULL),
    INTC("tenant-maxclients", 0, &server.tenant_maxclients, 0, LLONG_MAX, "0", NULL),
    INTC("lease-ttl", 0, &server.lease_ttl, 1, LLONG_MAX, "10000", NULL),
    INTC("soft-pin-ttl", 0, &server.soft_pin_ttl, 1, LLONG_MAX, "1800000", NULL),
    INTC("max-soft-pin-ttl", 0, &server.max_soft_pin_ttl, 1, LLONG_MAX, "86400000", NULL),
    INTC("put-timeout", 0, &server.put_timeout, 0, LLONG_MAX, "30000", NULL),
    INTC("client-max-pending-puts", 0, &server.client_max_pending_puts, 1, LLONG_MAX, "16384", NULL),
    INTC("client-max-watched-keys", 0, &server.client_max_watched_keys, 0, LLONG_MAX, "100000", NULL),
    INTC("client-max-subscriptions", 0, &server.client_max_subscriptions, 0, LLONG_MAX, "100000", NULL),
    INTC("put-release-timeout", 0, &server.put_release_timeout, 0, LLONG_MAX, "600000", NULL),
    INTC("default-replicas", 0, &server.default_replicas, 1, STORE_MAX_REPLICAS, "1", NULL),
    ENUMC("allocation-strategy", 0, &server.allocation_strategy, placementEnum, "random", NULL),
    MEMC("remote-get-max-size", 0, &server.remote_get_max_size, 0, LLONG_MAX, "64mb"),
    INTC("remote-get-timeout", 0, &server.remote_get_timeout, 1, 3600000, "2000", NULL),
    INTC("remote-get-max-inflight", 0, &server.remote_get_max_inflight, 0, 100000, "64", applyMaxclients),
    INTC("remote-get-max-inflight-per-client", 0, &server.remote_get_max_inflight_client, 1, 100000, "8", NULL),
    /* Cluster (cluster.c, cluster_sync.c) */
    BOOLC("cluster-enabled", CFG_IMMUTABLE, &server.cluster_enabled, "no"),
    STRC("cluster-etcd-endpoints", CFG_IMMUTABLE, &server.cluster_etcd_endpoints, "http://127.0.0.1:2379"),
    STRC("cluster-name", CFG_IMMUTABLE, &server.cluster_name, "mooncake"),
    STRC("cluster-config-file", CFG_IMMUTABLE, &server.cluster_config_file, ""),
    INTC("cluster-node-timeout", CFG_IMMUTABLE, &server.cluster_node_timeout, 1000, LLONG_MAX / 2, "15000", NULL),
    STRC("cluster-announce-ip", CFG_IMMUTABLE, &server.cluster_announce_ip, ""),
    INTC("cluster-announce-port", CFG_IMMUTABLE, &server.cluster_announce_port, 0, 65535, "0", NULL),
    INTC("cluster-announce-bus-port", CFG_IMMUTABLE, &server.cluster_announce_bus_port, 0, 65535, "0", NULL),
    BOOLCA("cluster-require-full-coverage", 0, &server.cluster_require_full_coverage, "yes", applyFullCoverage),
    BOOLC("cluster-replica-ack", 0, &server.cluster_replica_ack, "no"),
    /* Replication (replication.c) */
    MEMCA("repl-backlog-size", CFG_APPLY_LAST, &server.repl_backlog_size, 16 * 1024, LLONG_MAX / 2, "1mb", applyBacklogSize),
    INTC("repl-backlog-ttl", 0, &server.repl_backlog_ttl, 0, LLONG_MAX / 1000, "3600", NULL),
    SPECC("masterauth", CFG_ONEARG | CFG_BINARY | CFG_SECRET, "", setMasterauth, getMasterauth),
    STRC("masteruser", 0, &server.masteruser, ""),
    {NULL, 0, 0, NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL}};

static standardConfig *lookupConfig(const char *name) {
    for (standardConfig *c = configs; c->name; c++)
        if (!strcasecmp(c->name, name)) return c;
    return NULL;
}

/* ---- typed set/get ------------------------------------------------------- */

/* Sets one directive from its tokens; on error *err says why (and the value
 * is unchanged). Does not run apply hooks: the callers decide when. */
static int setConfigValue(standardConfig *c, sds *argv, int argc, const char **err) {
    static char msg[128];
    if (c->type == CFG_SPECIAL) return c->setSpecial(argv, argc, err);
    if (argc != 1) {
        *err = "wrong number of arguments";
        return C_ERR;
    }
    const char *v = argv[0];
    switch (c->type) {
    case CFG_BOOL: {
        int b;
        if (!strcasecmp(v, "yes")) b = 1;
        else if (!strcasecmp(v, "no")) b = 0;
        else {
            *err = "argument must be 'yes' or 'no'";
            return C_ERR;
        }
        *(int *)c->ptr = b;
        return C_OK;
    }
    case CFG_INT:
    case CFG_MEM: {
        long long ll;
        if (c->flags & CFG_OCTAL) {
            char *end;
            errno = 0;
            ll = strtoll(v, &end, 8);
            if (*v == '\0' || *end || errno) {
                *err = "argument couldn't be parsed into an integer";
                return C_ERR;
            }
        } else if (c->type == CFG_MEM) {
            int e;
            ll = memtoll(v, &e);
            /* A negative size is not a memory value (Redis's words for
             * it), rather than a number out of range. */
            if (e || ll < 0) {
                *err = "argument must be a memory value";
                return C_ERR;
            }
        } else if (!string2ll(v, strlen(v), &ll)) {
            *err = "argument couldn't be parsed into an integer";
            return C_ERR;
        }
        if (ll < c->lower || ll > c->upper) {
            snprintf(msg, sizeof(msg), "argument must be between %lld and %lld inclusive", c->lower, c->upper);
            *err = msg;
            return C_ERR;
        }
        *(long long *)c->ptr = ll; /* every integer directive is a long long */
        return C_OK;
    }
    case CFG_DOUBLE: {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (*v == '\0' || *end || errno || d != d) {
            *err = "argument couldn't be parsed into a number";
            return C_ERR;
        }
        if (d < c->dlower || d > c->dupper) {
            snprintf(msg, sizeof(msg), "argument must be between %g and %g inclusive", c->dlower, c->dupper);
            *err = msg;
            return C_ERR;
        }
        *(double *)c->ptr = d;
        return C_OK;
    }
    case CFG_ENUM:
        for (const configEnum *e = c->enums; e->name; e++) {
            if (!strcasecmp(e->name, v)) {
                *(int *)c->ptr = e->value;
                return C_OK;
            }
        }
        snprintf(msg, sizeof(msg), "argument(s) must be one of the following: ");
        for (const configEnum *e = c->enums; e->name; e++) {
            strncat(msg, e->name, sizeof(msg) - strlen(msg) - 3);
            if (e[1].name) strncat(msg, ", ", sizeof(msg) - strlen(msg) - 1);
        }
        *err = msg;
        return C_ERR;
    case CFG_STRING: {
        char **p = c->ptr;
        zfree(*p);
        *p = v[0] ? zstrdup(v) : NULL;
        return C_OK;
    }
    }
    *err = "unknown type";
    return C_ERR;
}

static sds getConfigValue(standardConfig *c) {
    switch (c->type) {
    case CFG_BOOL: return sdsnew(*(int *)c->ptr ? "yes" : "no");
    case CFG_INT:
    case CFG_MEM:
        if (c->flags & CFG_OCTAL) return sdscatprintf(sdsempty(), "%llo", *(long long *)c->ptr);
        return sdscatprintf(sdsempty(), "%lld", *(long long *)c->ptr);
    case CFG_DOUBLE: return sdscatdouble(sdsempty(), *(double *)c->ptr);
    case CFG_ENUM:
        for (const configEnum *e = c->enums; e->name; e++)
            if (e->value == *(int *)c->ptr) return sdsnew(e->name);
        return sdsempty();
    case CFG_STRING: {
        char *s = *(char **)c->ptr;
        return sdsnew(s ? s : "");
    }
    case CFG_SPECIAL: return c->getSpecial();
    }
    return sdsempty();
}

/* Splits a value for a SPECIAL directive given as one CONFIG SET string. */
static sds *splitValue(standardConfig *c, sds value, int *argc) {
    if (c->type != CFG_SPECIAL || (c->flags & CFG_ONEARG)) {
        sds *argv = zmalloc(sizeof(sds));
        argv[0] = sdsdup(value);
        *argc = 1;
        return argv;
    }
    if (sdslen(value) == 0) {
        sds *argv = zmalloc(sizeof(sds));
        argv[0] = sdsempty();
        *argc = 1;
        return argv;
    }
    return sdssplitargs(value, argc);
}

sds configGetValueString(const char *name) {
    standardConfig *c = lookupConfig(name);
    return c ? getConfigValue(c) : NULL;
}

/* Copies the table-owned values into the server struct where the server
 * keeps a narrower type. */
static void syncDerived(void) {
    server.port = (int)cfg_port;
    server.tcp_backlog = (int)cfg_tcp_backlog;
    server.unixsocketperm = (unsigned int)cfg_unixsocketperm;
}

void initConfigValues(void) {
    for (standardConfig *c = configs; c->name; c++) {
        if (!strcmp(c->name, "dir")) continue; /* the cwd is the default */
        int argc;
        sds v = sdsnew(c->deflt);
        sds *argv = splitValue(c, v, &argc);
        const char *err = NULL;
        if (setConfigValue(c, argv, argc, &err) != C_OK) {
            fprintf(stderr, "bad default for %s: %s\n", c->name, err);
            abort();
        }
        sdsfreesplitres(argv, argc);
        sdsfree(v);
    }
    syncDerived();
}

/* ---- loading ------------------------------------------------------------- */

/* config is an sds: a file may hold any bytes, and the whole of it is read
 * (strlen would stop at a zero byte and quietly ignore every directive
 * after it). A line holding a zero byte is refused: sdssplitargs would end
 * the line there, so "maxmemory 5\0gb" would set 5 bytes; a value that
 * needs the byte writes it "\x00" in quotes, as CONFIG REWRITE does. */
static int loadConfigFromString(const sds config, const char *origin, char *errbuf, size_t errlen) {
    int totlines;
    int rc = C_OK;
    sds *lines = sdssplitlen(config, sdslen(config), "\n", 1, &totlines);
    for (int i = 0; i < totlines; i++) {
        sds line = lines[i];
        int has_nul = memchr(line, '\0', sdslen(line)) != NULL;
        sdstrim(line, " \t\r\n");
        if (!has_nul && (line[0] == '#' || line[0] == '\0')) continue;
        int argc = 0;
        sds *argv = has_nul ? NULL : sdssplitargs(line, &argc);
        const char *err = NULL;
        if (has_nul) {
            err = "A zero byte in a configuration line (write it \"\\x00\" inside double quotes)";
        } else if (argv == NULL) {
            err = "Unbalanced quotes in configuration line";
        } else if (argc == 0) {
            sdsfreesplitres(argv, argc);
            continue;
        } else {
            standardConfig *c = lookupConfig(argv[0]);
            if (c == NULL) {
                err = "Bad directive or wrong number of arguments";
            } else if (argc == 2 && c->type == CFG_SPECIAL && !(c->flags & CFG_ONEARG) &&
                       strchr(argv[1], ' ')) {
                /* Several words as one quoted argument, the form a command
                 * line gives (--client-output-buffer-limit "normal 1mb 0 0",
                 * --bind "127.0.0.1 ::1"): split as CONFIG SET splits, as
                 * redis-server takes it. */
                int sargc = 0;
                sds *sargv = splitValue(c, argv[1], &sargc);
                if (sargv == NULL) err = "Unbalanced quotes in configuration line";
                else if (setConfigValue(c, sargv, sargc, &err) == C_OK) err = NULL;
                if (sargv) sdsfreesplitres(sargv, sargc);
            } else if (setConfigValue(c, argv + 1, argc - 1, &err) == C_OK) {
                err = NULL;
            }
        }
        if (argv) sdsfreesplitres(argv, argc);
        if (err) {
            snprintf(errbuf, errlen, "Reading the configuration %s, at line %d\n>>> '%s'\n%s", origin,
                     i + 1, line, err);
            rc = C_ERR;
            break;
        }
    }
    sdsfreesplitres(lines, totlines);
    return rc;
}

/* One source of directives: a file, or standard input for "-". */
static int loadConfigSource(const char *filename, char *err, size_t errlen) {
    int from_stdin = !strcmp(filename, "-");
    FILE *fp = from_stdin ? stdin : fopen(filename, "r");
    if (fp == NULL) {
        snprintf(err, errlen, "Fatal error, can't open config file '%s': %s", filename, strerror(errno));
        return C_ERR;
    }
    sds text = readFileSds(fp);
    /* A read that fails (a directory: fopen opens it, read says EISDIR)
     * must not look like an empty file, or the server would start on
     * its defaults as if nothing were wrong. */
    int read_errno = ferror(fp) ? (errno ? errno : EIO) : 0;
    if (!from_stdin) fclose(fp);
    if (read_errno) {
        snprintf(err, errlen, "Fatal error, can't read config file '%s': %s", filename, strerror(read_errno));
        sdsfree(text);
        return C_ERR;
    }
    if (!from_stdin) {
        char *abs = realpath(filename, NULL);
        if (abs) {
            server.configfile = zstrdup(abs);
            free(abs);
        }
    }
    sds origin = from_stdin ? sdsnew("from standard input") : sdscatprintf(sdsempty(), "file '%s'", filename);
    int rc = loadConfigFromString(text, origin, err, errlen);
    sdsfree(origin);
    sdsfree(text);
    return rc;
}

/* The file first, then standard input when "-" is the last argument (as
 * redis-server: `mooncake-server mooncake.conf --port 7000 -`, or "-" alone
 * as the file), then command-line overrides ("--port 7000 --bind a b"),
 * which win because they come last, as with redis-server. A trailing "-"
 * used to be taken for an argument of the option before it, so the form the
 * usage line shows did not start. */
int loadServerConfig(const char *filename, int argc, char **argv, char *err, size_t errlen) {
    int stdin_too = argc > 0 && !strcmp(argv[argc - 1], "-") && !(filename && !strcmp(filename, "-"));
    if (stdin_too) argc--;
    if (filename && loadConfigSource(filename, err, errlen) != C_OK) return C_ERR;
    if (stdin_too && loadConfigSource("-", err, errlen) != C_OK) return C_ERR;
    sds config = sdsempty();
    for (int j = 0; j < argc; j++) {
        if (!strncmp(argv[j], "--", 2) && argv[j][2]) {
            if (sdslen(config)) config = sdscat(config, "\n");
            config = sdscat(config, argv[j] + 2);
            config = sdscat(config, " ");
        } else {
            config = sdscatrepr(config, argv[j], strlen(argv[j]));
            config = sdscat(config, " ");
        }
    }
    int rc = loadConfigFromString(config, "from the command line", err, errlen);
    sdsfree(config);
    if (rc == C_OK) syncDerived();
    return rc;
}

/* ---- CONFIG GET / SET / RESETSTAT / REWRITE ------------------------------ */

static void configGetCommand(client *c) {
    long long n = 0;
    /* Collected first: the reply needs the count up front. */
    sds *names = NULL, *values = NULL;
    /* The passwords are the server's (requirepass is the default user's,
     * masterauth the primary's): a tenant granted CONFIG GET, to read
     * limits, gets no parameter by those names, as on a server without
     * them, not the keys to every other tenant's data. */
    int tenant = aclUserRestricted(c->user);
    for (standardConfig *cf = configs; cf->name; cf++) {
        if (tenant && (cf->flags & CFG_SECRET)) continue;
        for (int j = 2; j < c->argc; j++) {
            if (stringmatchlen(c->argv[j], sdslen(c->argv[j]), cf->name, strlen(cf->name), 1)) {
                names = zrealloc(names, sizeof(sds) * (size_t)(n + 1));
                values = zrealloc(values, sizeof(sds) * (size_t)(n + 1));
                /* A plain name (no glob) comes back as it was asked, in
                 * its case: Redis 7.0 does so, and clients index the
                 * reply by the name they asked for (CONFIG GET MAXMEMORY). */
                int plain = strpbrk(c->argv[j], "*?[") == NULL;
                names[n] = plain ? sdsdup(c->argv[j]) : sdsnew(cf->name);
                values[n] = getConfigValue(cf);
                n++;
                break;
            }
        }
    }
    addReplyMapLen(c, n);
    for (long long i = 0; i < n; i++) {
        addReplyBulkSds(c, names[i]);
        addReplyBulkSds(c, values[i]);
    }
    zfree(names);
    zfree(values);
}

static int protectedConfigAllowed(const client *c) {
    if (server.enable_protected_configs == PROTECTED_YES) return 1;
    if (server.enable_protected_configs != PROTECTED_LOCAL) return 0;
    if (c->flags & CLIENT_UNIX_SOCKET) return 1;
    const char *a = c->addr[0] == '[' ? c->addr + 1 : c->addr; /* [::1]:port */
    return !strncmp(a, "127.", 4) || !strncmp(a, "::1]", 4) || !strncmp(a, "::ffff:127.", 11);
}

static void configSetCommand(client *c) {
    /* A name without its value among pairs: Redis 7.0's syntax error (the
     * arity, -4, already refused CONFIG SET name alone). */
    if (c->argc % 2 != 0) {
        addReplyErrorSyntax(c);
        return;
    }
    int n = (c->argc - 2) / 2;
    standardConfig **cfs = zcalloc(sizeof(*cfs) * (size_t)n);
    sds *old = zcalloc(sizeof(sds) * (size_t)n);
    const char *err = NULL;
    int failed = -1, applied_upto = 0;
    aclPasswordsCopy *passwords = NULL;
    for (int i = 0; i < n; i++) {
        sds name = c->argv[2 + 2 * i];
        cfs[i] = lookupConfig(name);
        if (!cfs[i]) {
            addReplyErrorFormat(c, "ERR Unknown option or number of arguments for CONFIG SET - '%s'", name);
            goto cleanup;
        }
        for (int k = 0; k < i; k++) {
            if (cfs[k] == cfs[i]) {
                err = "duplicate parameter";
                failed = i;
                goto fail;
            }
        }
        if (cfs[i]->flags & CFG_IMMUTABLE) {
            err = "can't set immutable config";
            failed = i;
            goto fail;
        }
        if ((cfs[i]->flags & CFG_PROTECTED) && !protectedConfigAllowed(c)) {
            err = "can't set protected config";
            failed = i;
            goto fail;
        }
    }
    /* Set all, remembering the old values, then apply all. Any failure
     * restores every old value, so a multi-parameter SET is atomic. The
     * default user's passwords are kept aside as well: requirepass's old
     * value is not all of them (ACL SETUSER default >a leaves it ""), and
     * setting it back alone would leave the default user nopass -- a
     * refused `CONFIG SET requirepass x maxmemory junk` opened the server
     * to everyone (found probing CONFIG SET's atomicity). */
    passwords = aclDefaultUserPasswordsCopy();
    for (int i = 0; i < n; i++) {
        old[i] = getConfigValue(cfs[i]);
        /* The parsers (sdssplitargs included) read values as C strings, so
         * "5\0junk" would set 5 and "127.0.0.1\0junk" 127.0.0.1: a value
         * with a zero byte is refused unless the directive keeps its bytes
         * (the passwords). A file cannot carry one either (loading refuses
         * the line), nor can the command line. */
        sds value = c->argv[3 + 2 * i];
        if (!(cfs[i]->flags & CFG_BINARY) && memchr(value, '\0', sdslen(value)) != NULL) {
            err = "argument must not contain a zero byte";
            applied_upto = i;
            failed = i;
            goto restore;
        }
        int argc;
        sds *argv = splitValue(cfs[i], value, &argc);
        int rc = argv ? setConfigValue(cfs[i], argv, argc, &err) : C_ERR;
        if (!argv) err = "Unbalanced quotes";
        if (argv) sdsfreesplitres(argv, argc);
        applied_upto = i;
        if (rc != C_OK) {
            failed = i;
            goto restore;
        }
        applied_upto = i + 1;
    }
    /* The hooks that may refuse (http-*, maxclients, maxmemory) and whose
     * effect the undo reverses run first; the CFG_APPLY_LAST ones after
     * them: trimming the ACL log or the replication backlog loses entries,
     * and turning the AOF on forks a rewrite and writes files, none of which
     * setting the old value back restores. In the order given,
     * `CONFIG SET appendonly yes http-port <busy>` was refused after
     * leaving an appendonlydir behind, and `acllog-max-len 0 maxmemory
     * <too big>` after emptying the ACL log. Of those, the AOF's may still
     * refuse (its directory cannot be opened): it goes before the trims. */
    for (int tier = 0; tier < 3; tier++) {
        for (int i = 0; i < n; i++) {
            int f = cfs[i]->flags;
            int t = !(f & CFG_APPLY_LAST) ? 0 : (f & CFG_APPLY_MAY_REFUSE) ? 1 : 2;
            if (cfs[i]->apply == NULL || t != tier) continue;
            if (cfs[i]->apply(&err) != C_OK) {
                failed = i;
                goto restore;
            }
        }
    }
    syncDerived();
    addReplyOk(c);
    goto cleanup;
restore:
    for (int i = 0; i < applied_upto; i++) {
        int argc;
        const char *ignored;
        sds *argv = splitValue(cfs[i], old[i], &argc);
        if (argv) {
            setConfigValue(cfs[i], argv, argc, &ignored);
            sdsfreesplitres(argv, argc);
        }
        if (cfs[i]->apply) cfs[i]->apply(&ignored);
    }
    aclDefaultUserPasswordsRestore(passwords);
    passwords = NULL;
    syncDerived();
fail:
    addReplyErrorFormat(c, "ERR CONFIG SET failed (possibly related to argument '%s') - %s",
                        c->argv[2 + 2 * failed], err);
cleanup:
    aclDefaultUserPasswordsFree(passwords);
    for (int i = 0; i < n; i++) sdsfree(old[i]);
    zfree(old);
    zfree(cfs);
}

/* A size as a config file gives it: the largest binary unit that divides it. */
static sds catMemory(sds s, long long ll) {
    const char *unit = "";
    long long div = 1;
    if (ll && ll % (1024LL * 1024 * 1024) == 0) unit = "gb", div = 1024LL * 1024 * 1024;
    else if (ll && ll % (1024LL * 1024) == 0) unit = "mb", div = 1024LL * 1024;
    else if (ll && ll % 1024 == 0) unit = "kb", div = 1024;
    return sdscatprintf(s, "%lld%s", ll / div, unit);
}

/* A value as it should appear in a config file line. The output buffer
 * limits are one line per class with sizes in units, as Redis writes them
 * and as mooncake.conf gives them: CONFIG GET's one line of bytes (Redis
 * 7.0's form, "slave" included) would replace the file's three readable
 * lines with one an operator has to decode. */
static sds formatConfigLine(standardConfig *c) {
    if (c->type == CFG_SPECIAL && !strcmp(c->name, "client-output-buffer-limit")) {
        static const char *names[COB_CLASSES] = {"normal", "replica", "pubsub"};
        sds line = sdsempty();
        for (int i = 0; i < COB_CLASSES; i++) {
            line = sdscatprintf(line, "%s%s %s ", i ? "\n" : "", c->name, names[i]);
            line = catMemory(line, (long long)server.cob[i].hard);
            line = sdscat(line, " ");
            line = catMemory(line, (long long)server.cob[i].soft);
            line = sdscatprintf(line, " %lld", server.cob[i].soft_seconds);
        }
        return line;
    }
    sds v = getConfigValue(c);
    sds line = sdsnew(c->name);
    line = sdscat(line, " ");
    if (c->type == CFG_SPECIAL && !(c->flags & CFG_ONEARG)) {
        line = sdslen(v) ? sdscatsds(line, v) : sdscat(line, "\"\"");
    } else if (c->type == CFG_MEM) {
        line = catMemory(line, *(long long *)c->ptr);
    } else {
        int plain = sdslen(v) > 0;
        for (size_t i = 0; i < sdslen(v); i++)
            if (v[i] <= ' ' || v[i] == '"' || v[i] == '\'' || v[i] > '~') plain = 0;
        line = plain ? sdscatsds(line, v) : sdscatrepr(line, v, sdslen(v));
    }
    sdsfree(v);
    return line;
}

static int isDefault(standardConfig *c) {
    if (!strcmp(c->name, "dir")) return 0; /* always written: the cwd may differ */
    sds v = getConfigValue(c);
    int argc;
    sds d = sdsnew(c->deflt);
    /* Compare by re-parsing the default into the same canonical form. */
    sds canon;
    if (c->type == CFG_MEM) {
        int e;
        canon = sdscatprintf(sdsempty(), "%lld", memtoll(d, &e));
    } else if (c->type == CFG_DOUBLE) {
        canon = sdscatdouble(sdsempty(), strtod(d, NULL));
    } else if (c->flags & CFG_OCTAL) {
        canon = sdscatprintf(sdsempty(), "%llo", strtoull(d, NULL, 8));
    } else {
        canon = sdsdup(d);
    }
    (void)argc;
    int same = !strcasecmp(v, canon);
    sdsfree(v);
    sdsfree(d);
    sdsfree(canon);
    return same;
}

/* Rewrites the file in place: a directive's first line is replaced by its
 * current value, its other lines dropped; comments and unknown lines stay;
 * non-default directives not in the file are appended. Written to a
 * temporary file and renamed, so a crash never leaves half a config. */
static int rewriteConfig(const char *path, const char **err) {
    FILE *fp = fopen(path, "r");
    /* A file that is gone is written anew; one that is there but cannot be
     * read is left alone: rewriting it from nothing would drop its comments
     * and every directive it gives its default value. */
    if (fp == NULL && errno != ENOENT) {
        *err = strerror(errno);
        return C_ERR;
    }
    sds content = fp ? readFileSds(fp) : sdsempty();
    if (fp && ferror(fp)) {
        *err = strerror(errno ? errno : EIO);
        fclose(fp);
        sdsfree(content);
        return C_ERR;
    }
    if (fp) fclose(fp);
    int nlines;
    sds *lines = sdssplitlen(content, sdslen(content), "\n", 1, &nlines);
    sdsfree(content);
    int ncfg = 0;
    while (configs[ncfg].name) ncfg++;
    char *written = zcalloc((size_t)ncfg);
    int header = 0; /* the file already has our header: append under it */
    sds out = sdsempty();
    for (int i = 0; i < nlines; i++) {
        if (i == nlines - 1 && sdslen(lines[i]) == 0) break; /* the final newline */
        sds trimmed = sdsdup(lines[i]);
        sdstrim(trimmed, " \t\r");
        int argc = 0;
        sds *argv = (trimmed[0] && trimmed[0] != '#') ? sdssplitargs(trimmed, &argc) : NULL;
        standardConfig *c = argc > 0 ? lookupConfig(argv[0]) : NULL;
        if (c) {
            int idx = (int)(c - configs);
            if (!written[idx]) {
                sds l = formatConfigLine(c);
                out = sdscatsds(out, l);
                out = sdscat(out, "\n");
                sdsfree(l);
                written[idx] = 1;
            }
        } else {
            if (!strcmp(trimmed, "# Generated by CONFIG REWRITE")) header = 1;
            out = sdscatsds(out, lines[i]);
            out = sdscat(out, "\n");
        }
        if (argv) sdsfreesplitres(argv, argc);
        sdsfree(trimmed);
    }
    for (int i = 0; i < ncfg; i++) {
        if (written[i] || isDefault(&configs[i])) continue;
        if (!header) {
            out = sdscat(out, "# Generated by CONFIG REWRITE\n");
            header = 1;
        }
        sds l = formatConfigLine(&configs[i]);
        out = sdscatsds(out, l);
        out = sdscat(out, "\n");
        sdsfree(l);
    }
    sdsfreesplitres(lines, nlines);
    zfree(written);
    int rc = C_OK;
    if (writeFileAtomic(path, out, sdslen(out)) == -1) {
        *err = strerror(errno);
        rc = C_ERR;
    }
    sdsfree(out);
    return rc;
}

void configCommand(client *c) {
    const char *sub = c->argv[1];
    if (!strcasecmp(sub, "help") && c->argc == 2) {
        static const char *help[] = {
            "GET <pattern> [<pattern> ...]", "    Return parameters matching the glob-like <pattern>s and their values.",
            "SET <directive> <value> [<directive> <value> ...]", "    Set the configuration <directive> to <value> (all or none).",
            "RESETSTAT", "    Reset statistics reported by the INFO command.",
            "REWRITE", "    Rewrite the configuration file.",
            NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "get") && c->argc >= 3) {
        configGetCommand(c);
    } else if (!strcasecmp(sub, "set") && c->argc >= 4) {
        configSetCommand(c);
    } else if (!strcasecmp(sub, "resetstat") && c->argc == 2) {
        resetServerStats();
        addReplyOk(c);
    } else if (!strcasecmp(sub, "rewrite") && c->argc == 2) {
        if (server.configfile == NULL) {
            addReplyError(c, "ERR The server is running without a config file");
            return;
        }
        const char *err = NULL;
        if (rewriteConfig(server.configfile, &err) != C_OK) {
            serverLog(LL_WARNING, "CONFIG REWRITE failed: %s", err);
            addReplyErrorFormat(c, "ERR Rewriting config file: %s", err);
        } else {
            serverLog(LL_NOTICE, "CONFIG REWRITE executed with success.");
            addReplyOk(c);
        }
    } else {
        addReplySubcommandSyntaxError(c);
    }
}
