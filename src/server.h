/* server.h -- the one global `server`, the client, the command table.
 *
 * Mooncake-C's server is a single-threaded event loop (ae.c). Everything a
 * command can touch hangs off `server`; there are no locks because nothing
 * runs concurrently with a command. Modules with their own state (segment,
 * store, slowlog) keep it here too so INFO and CONFIG can reach it without
 * accessors.
 */
#ifndef SERVER_H
#define SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ae.h"
#include "dict.h"
#include "resp.h"
#include "sds.h"

/* Two versions, on purpose:
 *
 * MOONCAKE_VERSION is ours. It comes from the top-level VERSION file
 * (src/Makefile passes -DMOONCAKE_VERSION), the one place it is written;
 * --version, INFO's mooncake_version, HELLO's mooncake_version, libmooncake's
 * mc_version() and the pkg-config file all print it.
 *
 * REDIS_COMPAT_VERSION is the Redis release whose protocol and command
 * behaviour we follow. It is what INFO calls redis_version and what HELLO
 * calls version, because those two fields are where Redis clients read a
 * server's version to decide what it can do: redis-cli 7.2+ reads INFO's
 * redis_version to pick which of its built-in command docs apply, Lettuce
 * parses HELLO's version after every handshake and compares it with the
 * release that brought a command (CLIENT SETINFO: 7.2). Our own 0.x there
 * would make them treat us as a Redis older than RESP3. Dragonfly made the
 * same choice (HELLO version = a Redis release, dragonfly_version beside
 * it), and clients already look for such a <name>_version field. */
#ifndef MOONCAKE_VERSION
#error "MOONCAKE_VERSION is not defined: build with src/Makefile (it reads ../VERSION)"
#endif
#define REDIS_COMPAT_VERSION "7.0.0"

#define C_OK 0
#define C_ERR -1

#define CONFIG_DEFAULT_PORT 6379
#define CONFIG_BINDADDR_MAX 16
#define NET_IP_STR_LEN 46
#define NET_ADDR_STR_LEN (NET_IP_STR_LEN + 32)
#define CONFIG_MIN_RESERVED_FDS 32
#define PROTO_IOBUF_LEN (16 * 1024)     /* read size for the query buffer */
#define PROTO_REPLY_CHUNK (16 * 1024)   /* a client's reply buffer, reply block size */
#define CLIENT_IDLE_SHRINK_MS 2000      /* idle this long: buffers are given back */
#define PROTO_BIG_ARG (32 * 1024)       /* args this long are read in place */
#define PROTO_LOWAT_ARG (1024 * 1024)   /* args this long are read in ... */
#define PROTO_LOWAT (256 * 1024)        /* ... chunks of at least this (SO_RCVLOWAT) */
#define PROTO_REPLY_OBJ_MIN (16 * 1024) /* values this long are sent from the pool */
#define LOG_MAX_LEN 1024

/* Log levels. */
#define LL_DEBUG 0
#define LL_VERBOSE 1
#define LL_NOTICE 2
#define LL_WARNING 3

/* Client flags. */
#define CLIENT_CLOSE_AFTER_REPLY (1 << 0) /* QUIT, protocol error */
#define CLIENT_CLOSE_ASAP (1 << 1)        /* killed, output limit: free in beforeSleep */
#define CLIENT_UNIX_SOCKET (1 << 2)
#define CLIENT_PENDING_WRITE (1 << 3)     /* in server.clients_pending_write */
#define CLIENT_PROTECTED (1 << 4)         /* executing a command: don't free yet */
#define CLIENT_ASKING (1 << 5)            /* ASKING: the next command may use an importing slot */
#define CLIENT_READONLY (1 << 6)          /* READONLY: reads may be served by a replica */
#define CLIENT_BLOCKED (1 << 7)           /* waiting (etcd): input is not processed */
#define CLIENT_RERUN (1 << 16)            /* blocked before replying: the command runs again (relay.c) */
#define CLIENT_MAY_BLOCK (1 << 17)        /* running a command read from the socket: it may block */
#define CLIENT_PUBSUB (1 << 18)           /* subscribed to something (pubsub.c) */
#define CLIENT_NO_TOUCH (1 << 20)         /* CLIENT NO-TOUCH on: its reads leave the LRU alone */
#define CLIENT_NO_EVICT (1 << 21)         /* CLIENT NO-EVICT on (nothing evicts clients yet) */
#define CLIENT_REPL_WAIT (1 << 22)        /* its replies wait for replicas' acks (replication.c) */
#define CLIENT_PAUSED (1 << 23)           /* blocked by CLIENT PAUSE: in server.paused (networking.c) */
#define CLIENT_MULTI (1 << 8)             /* after MULTI: commands are queued (multi.c) */
#define CLIENT_DIRTY_CAS (1 << 9)         /* a WATCHed key changed: EXEC replies nil */
#define CLIENT_DIRTY_EXEC (1 << 10)       /* a command was refused while queueing: EXECABORT */
#define CLIENT_IN_EXEC (1 << 11)          /* running EXEC's queue: nothing may block (MONITOR, etcd) */
#define CLIENT_MONITOR (1 << 12)          /* in server.monitors (monitor.c) */
#define CLIENT_REPLY_OFF (1 << 13)        /* CLIENT REPLY OFF */
#define CLIENT_REPLY_SKIP (1 << 14)       /* this command's reply is dropped (CLIENT REPLY SKIP) */
#define CLIENT_REPLY_SKIP_NEXT (1 << 15)  /* ... and the next one's: set by SKIP itself */
#define CLIENT_REPLY_PAUSED (1 << 19)     /* its unread replies passed client-reply-pause-limit: input waits */

/* Command flags (bits) and their COMMAND INFO names. */
#define CMD_WRITE (1 << 0)
#define CMD_READONLY (1 << 1)
#define CMD_DENYOOM (1 << 2)
#define CMD_ADMIN (1 << 3)
#define CMD_NOAUTH (1 << 4)   /* allowed before AUTH */
#define CMD_LOADING (1 << 5)
#define CMD_STALE (1 << 6)
#define CMD_FAST (1 << 7)
#define CMD_NOSCRIPT (1 << 8)
#define CMD_SENTINEL (1 << 9)
#define CMD_PROTECTED (1 << 10)
#define CMD_MOVABLEKEYS (1 << 11)  /* keys found from a numkeys argument: see keynum_* */
#define CMD_ASKING (1 << 12)       /* served in an importing slot without ASKING (RESTORE-ASKING) */
#define CMD_SKIP_MONITOR (1 << 13) /* not shown to MONITOR (ADMIN commands never are) */
#define CMD_SKIP_SLOWLOG (1 << 14) /* not in SLOWLOG (EXEC: its commands are, one by one) */
#define CMD_NO_MULTI (1 << 15)     /* refused inside MULTI: see multi.c for which and why */
#define CMD_PUBSUB (1 << 16)       /* Pub/Sub; its key positions (SSUBSCRIBE, SPUBLISH) name channels */

typedef long long mstime_t;

struct client;
struct storeObj;
struct segment;

typedef void commandProc(struct client *c);
/* Where the bytes of a large argument go, decided after its header and
 * before its payload: see networking.c. Returns a destination of `len`
 * bytes (and may attach an object to the argument), or NULL for the heap. */
typedef char *bigArgProc(struct client *c, int argi, size_t len);

typedef struct serverCommand {
    const char *name;
    commandProc *proc;
    int arity;            /* > 0 exact, < 0 at least -arity */
    int flags;
    int firstkey, lastkey, keystep;
    const char *group;
    const char *summary;
    const char *since;
    const char *complexity;
    bigArgProc *bigarg;
    struct serverCommand *subcommands; /* NULL-name terminated; the container's proc dispatches */
    /* Filled at start-up. */
    struct serverCommand *parent;
    sds fullname;          /* "config|get" */
    long long calls, usec, rejected_calls, failed_calls;
    /* CMD_MOVABLEKEYS: argv[keynum_idx] counts the keys, the first at
     * keynum_first, then every keynum_step (BATCH.PUT.START: 1, 2, 2). */
    int keynum_idx, keynum_first, keynum_step;
    /* COMMAND DOCS "arguments", parsed at start-up from the command's
     * synopsis (commands.c, commandSynopses). */
    struct cmdArg *args;
    int nargs;
    struct latencyHist *latency; /* INFO latencystats (latency.c), made at the first call */
    /* ACL (acl.c, set at start-up): the bit of this command in a user's
     * bitmap, and its categories (ACL_CAT_*). */
    int id;
    uint64_t acl_categories;
    /* What ACL asks of its keys (ACL_READ | ACL_WRITE), from their key
     * flags as Redis 7 does: "access" reads, "insert", "delete" and
     * "update" write. [0] the first key, [1] the others (RENAME's
     * destination). Set by populateCommandDocs. */
    int key_perm[2];
} serverCommand;

/* A command queued between MULTI and EXEC (multi.c): its arguments, taken
 * over from the client. argobj and arglen are NULL unless an argument was
 * read in place (networking.c), as they are in the client. */
typedef struct multiCmd {
    struct serverCommand *cmd;
    int argc;
    sds *argv;
    struct storeObj **argobj;
    size_t *arglen;
} multiCmd;

typedef struct multiState {
    multiCmd *cmds;
    int count, cap;
    size_t bytes;   /* arguments held, for CLIENT LIST multi-mem */
} multiState;

/* One node of the reply chain: either heap bytes or a slice of a stored
 * value that is written to the socket straight from segment memory. */
typedef struct replyBlock {
    struct replyBlock *next;
    struct storeObj *obj;  /* non-NULL: bytes are obj's, `ptr` into the segment (or held for fill) */
    const char *ptr;
    size_t size, used;     /* heap blocks: capacity and fill; obj blocks: used = len */
    /* Non-NULL: buf's `used` bytes are computed by fill when the writer
     * first reaches the block (addReplyFilled); its arguments follow them. */
    void (*fill)(struct replyBlock *b);
    char buf[];
} replyBlock;

typedef struct client {
    uint64_t id;
    int fd;
    int flags;
    int resp;               /* 2 or 3 */
    int authenticated;
    struct user *user;      /* acl.c: default until AUTH; never NULL */
    struct user *counted_user; /* whose nclients counts this connection (aclClientCountAs) */
    sds name;
    char addr[NET_ADDR_STR_LEN];
    char laddr[NET_ADDR_STR_LEN];
    mstime_t ctime, lastinteraction;
    /* Input. */
    sds querybuf;
    size_t qb_pos;          /* parsed up to here */
    size_t querybuf_peak;
    respReqParser parser;
    int argc, argv_cap;
    long long expect_argc;  /* of the request being parsed, 0 = none */
    sds *argv;
    struct storeObj **argobj; /* argobj[i]: value arg i already in a segment */
    size_t *arglen;         /* with argobj: the length of an argument read in place
                             * (its argv[i] is empty); MONITOR shows it */
    const char *argerr;     /* a large arg was refused before its bytes came
                             * (no space, too big): the command replies this */
    size_t argv_bytes;
    /* A large argument being read in place. */
    struct {
        char *dst;          /* destination, NULL = discard */
        size_t len, got;
        char crlf[2];
        int crlf_got;
        int argi;
    } big;
    int rcvlowat;           /* SO_RCVLOWAT now set on fd; 0 = the default, 1 */
    struct serverCommand *cmd, *lastcmd;
    /* Output. */
    char *buf;               /* PROTO_REPLY_CHUNK bytes, allocated at the first reply and
                              * given back while the client idles (clientsCron) */
    size_t bufpos, sentlen;  /* sentlen: of buf, or of the head block once buf is out */
    size_t buf_peak;         /* most of buf used since it was last given back (CLIENT LIST rbp) */
    replyBlock *reply_head, *reply_tail;
    size_t reply_bytes;      /* bytes queued in blocks (heap and pool slices) */
    size_t reply_ref_bytes;  /* of them, pool slices queued by reference (addReplyRawPoolBytes) */
    mstime_t obuf_soft_limit_since;
    unsigned long long net_in, net_out;
    struct owner **owners;  /* owners this connection keeps alive (owner.c) */
    int nowners, owners_cap;
    struct dict *owners_index; /* owner -> 1 + its slot in owners, once there are many (owner.c) */
    int pass_fd;            /* SHM.ATTACH: sent by SCM_RIGHTS with the next write, -1 none */
    struct clusterOp *blocked_op; /* CLIENT_BLOCKED: the etcd change it waits for (cluster.c) */
    int pause_slot;               /* CLIENT_PAUSED: its index in server.paused (networking.c) */
    struct replicaLink *repl;     /* a replica's link to this primary, NULL if not one (replication.c) */
    long long repl_wait_offset, repl_wait_since; /* CLIENT_REPL_WAIT: the offset replicas must ack */
    int repl_marked, repl_held;   /* in replication.c's lists of writers / of held clients */
    long long wait_offset, wait_deadline; /* WAIT: the stream offset to be acked (-1: set at
                                           * beforeSleep), the time it gives up (0: never) */
    int wait_replicas, wait_listed;       /* WAIT: how many replicas; in replication.c's list */
    struct relayClient *relay;    /* reads from mounted segments for its command (relay.c) */
    struct clientLeases *leases;  /* GET.REPLICAS grants LEASE.RELEASE may end, NULL if none (t_store.c) */
    struct clientHolds *holds;    /* HOLD.REPLICAS grants, NULL if none (t_store.c) */
    struct putOwner *put_owner;   /* its puts' writer record, NULL before its first PUT.START (store.h) */
    struct clientPubsub *pubsub;  /* its subscriptions, NULL if none (pubsub.c) */
    /* Transactions (multi.c). */
    multiState mstate;      /* commands queued since MULTI */
    struct watchedKey **watched; /* this client's WATCHes */
    int nwatched, watched_cap;
    dict *watched_index;    /* key -> its WATCH, once it has many (multi.c), else NULL */
    struct client *prev, *next;               /* server.clients */
} client;

typedef struct slowlogEntry {
    sds *argv;
    int argc;
    long long id;
    long long duration;  /* us */
    time_t time;
    sds cname, peerid;
    sds user;            /* who ran it: a tenant's SLOWLOG shows its own */
} slowlogEntry;

/* client-output-buffer-limit classes. */
enum { COB_NORMAL = 0, COB_REPLICA = 1, COB_PUBSUB = 2, COB_CLASSES = 3 };

typedef struct cobLimit {
    unsigned long long hard, soft;
    long long soft_seconds;
} cobLimit;

/* The server's global state. The server's own names carry no `mc`
 * prefix: `mc`/`mc_` names libmooncake (mooncake.h) and nothing else. */
/* The structures that grow with use, whose work DEBUG VISITS counts: each
 * entry one of them looks at (compares, skips, moves or frees) adds one,
 * so a test can assert that an operation costs O(1) entries however many
 * there are, without timing anything. */
enum {
    VISITS_LEASES,   /* a connection's GET.REPLICAS grants (t_store.c) */
    VISITS_DEFERRED, /* removed versions waiting for their lease, found when one ends (store.c) */
    VISITS_DEFERRED_SWEEP, /* ... looked at by the cron's sweep of them (store.c) */
    VISITS_WATCHED,  /* a connection's WATCHes, looked at by WATCH (multi.c) */
    VISITS_PUBSUB,   /* subscriber slots and patterns looked at to (un)subscribe (pubsub.c) */
    VISITS_OWNER_SEGMENTS, /* segments looked at to find an owner's (owner.c) */
    VISITS_QUERYBUF, /* bytes of a query buffer's unparsed tail moved down (networking.c) */
    VISITS_CLIENT_OWNERS, /* a connection's owners looked at to find one (owner.c) */
    VISITS_SEGMENTS, /* segments looked at to find one by id or name, a free slot, or a put's
                      * place (segment.c, acl.c, placement.c) */
    VISITS_CRON_TICKS, /* serverCron runs: what the cron-* counts below are bounded per */
    VISITS_CRON_SEGMENTS, /* segment slots looked at by the crons (evict.c, t_segment.c) */
    VISITS_CRON_OWNERS, /* owners looked at by ownerCron (owner.c) */
    VISITS_CLIENTS,  /* connections looked at to find one by id (client.c) */
    VISITS_EXPIRE,   /* TTL entries looked at by the active expiry cycle (store.c) */
    VISITS_PAUSED,   /* commands held by CLIENT PAUSE looked at to run them again (networking.c) */
    VISITS_TENANT_EVICT, /* a tenant's keys looked at to evict one of them (tenantquota.c) */
    VISITS_AUTH_DIGESTS, /* password digests compared by AUTH, HELLO AUTH and HTTP (acl.c) */
    VISITS_KINDS
};
#define serverVisit(kind, n) (server.visits[(kind)] += (n))

struct mooncakeServer {
    /* General. */
    pid_t pid;
    char *executable;
    char *configfile;       /* absolute path, NULL if none */
    char runid[41];
    aeEventLoop *el;
    int shutdown_asap;
    mstime_t starttime_ms;
    long long starttime_mono;       /* monoMs() at start: INFO uptime */
    dict *commands;         /* name (lower case) -> serverCommand */
    long long cron_loops;
    mstime_t mstime;        /* cached each event-loop iteration: the wall clock, for absolute times */
    mstime_t monotime;      /* the same moment on monoMs(): every relative deadline (leases,
                             * pending puts, owner-ttl, drains) is on it (util.c) */
    /* Networking. */
    int port;
    char *bindaddr[CONFIG_BINDADDR_MAX];
    int bindaddr_count;
    int ipfd[CONFIG_BINDADDR_MAX];
    int ipfd_count;
    char *unixsocket;
    unsigned int unixsocketperm;
    int sofd;
    int tcp_backlog;
    client *clients_head, *clients_tail;
    dict *clients_by_id;      /* id -> client, for lookupClientByID (client.c) */
    unsigned long nclients;
    client **pending_writes;  /* clients with replies to flush in beforeSleep */
    size_t pending_writes_len, pending_writes_cap;
    client **clients_to_close; /* freed in beforeSleep, never mid-command */
    size_t clients_to_close_len, clients_to_close_cap;
    client *current_client;
    uint64_t next_client_id;
    sds requirepass;        /* NULL: none; binary-safe; the default user's password (acl.c) */
    char *acl_filename;     /* aclfile: users loaded at start-up and by ACL LOAD */
    long long acllog_max_len;
    int protected_mode;
    int enable_protected_configs; /* no, yes, local: CONFIG SET of dir (config.c) */
    long long maxclients;
    long long maxidletime;   /* seconds, 0 = never */
    long long tcpkeepalive;
    long long tcp_notsent_lowat; /* 0: the kernel's (unbounded) */
    char tcp_congestion[16]; /* "auto", "system" or an algorithm (config.c) */
    long long proto_max_bulk_len;
    long long client_max_querybuf_len;
    long long client_reply_pause_limit; /* unread reply bytes past which a client's commands wait (0: never) */
    cobLimit cob[COB_CLASSES];  /* normal, replica (links to replicas), pubsub (and MONITOR) */
    int notify_keyspace_events; /* NOTIFY_* classes configured (notify.h) */
    int notify_mask;            /* the classes that reach a channel: what notify.h tests */
    long long hz;
    long long busy_poll_us;  /* see aeSetBusyPoll */
    int busy_poll_auto;      /* the governor decides (server.c); no: spin whenever busy_poll_us allows */
    long long prefetch_batch; /* requests whose keys are prefetched at once (prefetch.c), 0 = off */
    /* Process. */
    int daemonize;
    char *pidfile;
    char *logfile;
    int verbosity;
    char *dir;
    /* Stats. */
    mstime_t stat_starttime;
    long long stat_numcommands, stat_numconnections, stat_rejected_conn;
    size_t stat_peak_memory;      /* the highest used_memory seen (cron, INFO, MEMORY STATS) */
    size_t startup_heap;          /* the heap when the server began serving (MEMORY STATS) */
    long long stat_expiredkeys, stat_evictedkeys, stat_keyspace_hits, stat_keyspace_misses;
    long long stat_net_input_bytes, stat_net_output_bytes;
    long long stat_total_error_replies;
    long long stat_oom_rejections;
    long long stat_bigarg_inplace, stat_reply_zero_copy;
    long long stat_prefetch_batches, stat_prefetch_keys; /* prefetch.c: batches of 2+ requests, keys */
    long long stat_data_write_bytes, stat_data_read_bytes, stat_shm_attach;
    long long stat_remote_get_bytes;  /* relayed from mounted segments to GET-family replies */
    long long stat_remote_get_refused, stat_remote_get_timeouts; /* relay.c */
    long long remote_get_inflight;    /* relayed reads in flight now */
    long long blocked_clients;
    /* CLIENT PAUSE (networking.c): what is paused until when, and the
     * clients whose command waits for the end. */
    int pause_type;                 /* PAUSE_NONE, PAUSE_WRITE or PAUSE_ALL */
    long long pause_end_ms;         /* monoMs(): a wall-clock step neither ends nor stretches it */
    int pause_released;             /* the pause ended or narrowed: beforeSleep reruns the waiters */
    long long pause_timer;          /* the ae time event that wakes the loop at the end, or -1 */
    struct client **paused;
    int npaused, paused_cap;
    long long stat_client_qbuf_limit_disconnections, stat_client_outbuf_limit_disconnections;
    long long stat_client_reply_pauses; /* times a client's input waited for it to read its replies */
    long long stat_client_state_limited; /* refused by a per-connection bound: MULTI queue, WATCH, SUBSCRIBE */
    long long stat_acl_denied_auth, stat_acl_denied_cmd, stat_acl_denied_key, stat_acl_denied_channel; /* acl.c */
    /* Slowlog. */
    struct slowlogEntry **slowlog;  /* ring, newest first when read */
    long long slowlog_len, slowlog_cap;
    long long slowlog_entry_id;
    long long slowlog_log_slower_than;
    long long slowlog_max_len;
    /* Keyspace and pool (store.c, segment.c). */
    dict *keys;             /* sds key -> storeObj* */
    dict *expires;          /* same sds key -> absolute ms (in the val pointer) */
    dict *pending;          /* sds key -> storeObj* of a put not yet ended */
    struct segment *self;   /* the server's own pool, segment id 1 */
    long long segment_size;
    long long maxmemory;    /* pool bytes in use + the dataset's heap (store.c); 0 = no limit */
    int latency_tracking;   /* per-command latency histograms (INFO latencystats) */
    long long latency_monitor_threshold; /* ms; events this long go to LATENCY (latencymon.c); 0: off */
    double latency_percentiles[16];
    int latency_npercentiles;
    int segment_hugepages;
    long long segment_numa_node;
    int segment_prefault;
    long long max_key_size;
    long long max_object_size;
    double evict_high_watermark;
    double evict_ratio;
    int evict_policy;
    long long evict_samples;
    long long evict_pending;  /* objects still to evict in this round (cron slices) */
    /* The append-only log (aof.c): the directives; its state is aof.c's. */
    int aof_enabled;          /* appendonly */
    int aof_fsync;            /* appendfsync: AOF_FSYNC_* */
    char *aof_dirname;        /* appenddirname, under dir */
    char *aof_filename;       /* appendfilename: the files' prefix */
    int aof_load_truncated;   /* a cut tail of the last file is cut off at load */
    long long auto_aof_rewrite_percentage, auto_aof_rewrite_min_size;
    /* Segments, owners, puts and leases (t_segment.c, owner.c, t_store.c). */
    long long owner_ttl;
    long long owner_probe_timeout;  /* ms a probe of a disconnected owner's host waits (0: no probes) */
    long long lease_ttl;
    long long soft_pin_ttl, max_soft_pin_ttl;
    long long put_timeout, put_release_timeout;
    long long client_max_pending_puts; /* puts one connection may hold open at a time */
    long long client_max_watched_keys;  /* keys one connection may WATCH at a time (0: no limit) */
    long long client_max_subscriptions; /* channels + patterns + shard channels per connection (0: no limit) */
    long long max_segments;        /* segments in the table, the pool included: MOUNT of a new one past it is -LIMIT */
    long long tenant_max_segments; /* segments one tenant (a user restricted by key patterns) may have mounted, 0 = any */
    long long tenant_maxmemory;    /* bytes one tenant's values may be charged, 0 = no bound (tenantquota.c) */
    long long tenant_maxclients;   /* connections authenticated as one tenant user, 0 = only maxclients */
    long long stat_tenant_rejected_conn; /* AUTH/HELLO refused by tenant-maxclients */
    long long zero_free_async_threshold; /* freed pool extents this large are zeroed by a thread */
    long long default_replicas;
    int allocation_strategy;
    long long remote_get_max_size;  /* GET of a value in a mounted segment: relay up to this */
    long long remote_get_timeout;   /* ms without progress */
    long long remote_get_max_inflight;        /* relayed reads in flight, server-wide */
    long long remote_get_max_inflight_client; /* ... and of one client */
    /* Cluster (cluster.c, etcd.c). */
    int cluster_enabled;
    char *cluster_etcd_endpoints;   /* space-separated URLs */
    char *cluster_name;             /* the etcd namespace */
    char *cluster_config_file;      /* holds this node's id, in dir */
    long long cluster_node_timeout; /* ms */
    char *cluster_announce_ip;
    long long cluster_announce_port, cluster_announce_bus_port;
    int cluster_require_full_coverage;
    int cluster_replica_ack;        /* a write is acknowledged once its replicas have it */
    long long repl_backlog_size;    /* bytes of the record stream kept for partial resyncs */
    long long repl_backlog_ttl;     /* s without replicas before a primary frees it; 0 never */
    sds masterauth;                 /* NULL: none; binary-safe; what a replica AUTHs with */
    char *masteruser;               /* NULL: AUTH <masterauth> (the default user) */
    struct clusterState *cluster;
    /* HTTP endpoints (http.c). */
    long long http_port;            /* 0: no HTTP listener */
    char *http_bind;                /* one address */
    long long http_maxclients;      /* open HTTP connections at most */
    long long http_timeout;         /* seconds an HTTP connection may stay idle */
    long long http_max_request_size; /* bytes of request line and headers per connection */
    long long stat_http_connections, stat_http_requests, stat_http_rejected;
    /* Transactions and MONITOR (multi.c, monitor.c). */
    dict *watched_keys;     /* sds key -> the WATCHes on it (a list) */
    long long watching;     /* WATCHes held by all clients: 0 lets key writes skip the dict */
    client **monitors;
    size_t nmonitors, monitors_cap;
    /* Entries visited by the structures that grow with use (DEBUG VISITS). */
    long long visits[VISITS_KINDS];
};

enum { EVICT_LRU = 0, EVICT_NOEVICTION = 1 };
enum { PLACE_RANDOM = 0, PLACE_FREE_RATIO = 1, PLACE_LOCAL_FIRST = 2 };

extern struct mooncakeServer server;
extern serverCommand commandTable[];

/* server.c */
void serverLog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void serverLogRaw(int level, const char *msg);
long long serverFdsNeeded(void);              /* descriptors the server may hold at once (server.c) */
int serverApplyFdLimits(const char **err); /* CONFIG SET of a directive in it */
#define serverAssert(e) \
    ((e) ? (void)0 : (serverAssertFail(#e, __FILE__, __LINE__), __builtin_unreachable()))
void serverAssertFail(const char *expr, const char *file, int line) __attribute__((noreturn));
serverCommand *lookupCommand(sds *argv, int argc);
serverCommand *lookupCommandByName(const char *name);
serverCommand *lookupCommandBuf(const char *name, size_t len);
/* Parses every synopsis into its command's args; aborts, saying which and
 * why, on a synopsis that is malformed or disagrees with the table. */
void populateCommandDocs(void);
void call(client *c);
int processCommand(client *c);
int listenToPort(void);
void closeListeners(void);
int prepareForShutdown(int force); /* C_ERR: refused (the log cannot take acknowledged writes) */

/* networking.c */
client *createClient(int fd, int unix);
client *lookupClientByID(uint64_t id); /* O(1): an index by id (client.c) */
void clientIndexAdd(client *c);         /* createClient / freeClient keep the index */
void clientIndexRemove(client *c);
void freeClient(client *c);
void freeClientAsync(client *c);
void freeClientsInAsyncFreeQueue(void);
void acceptTcpHandler(aeEventLoop *el, int fd, void *privdata, int mask);
void acceptUnixHandler(aeEventLoop *el, int fd, void *privdata, int mask);
void readQueryFromClient(aeEventLoop *el, int fd, void *privdata, int mask);
int handleClientsWithPendingWrites(void);
void resetClient(client *c);
void freeClientArgv(client *c);
void clientsCron(void);
void updateCachedTime(void); /* server.mstime and server.monotime, now */
void addReply(client *c, const char *s, size_t len);
void addReplyStr(client *c, const char *s);
void addReplyProto(client *c, const char *s, size_t len);
void addReplyError(client *c, const char *err);
void addReplyErrorFormat(client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void addReplyErrorArity(client *c);
void addReplyErrorSyntax(client *c);
void addReplyStatus(client *c, const char *status);
void addReplyOk(client *c);
void addReplyLongLong(client *c, long long ll);
void addReplyDouble(client *c, double d);
void addReplyBulk(client *c, const void *p, size_t len);
void addReplyBulkSds(client *c, sds s);  /* takes ownership */
void addReplyBulkCString(client *c, const char *s);
void addReplyBulkLongLong(client *c, long long ll);
void addReplyStoreObj(client *c, struct storeObj *o);
void addReplyRawPoolBytes(client *c, struct storeObj *o, const char *p, size_t len);
void addReplyFilled(client *c, struct storeObj *o, size_t len, const void *args, size_t argslen,
                    void (*fill)(replyBlock *b));
void addReplyNull(client *c);
void addReplyNullArray(client *c);
void addReplyArrayLen(client *c, long long len);
void addReplyPushLen(client *c, long long len); /* RESP3 push ('>'); an array under RESP2 */
void addReplyMapLen(client *c, long long len);
void addReplySetLen(client *c, long long len);
void addReplyBool(client *c, int b);
void addReplyVerbatim(client *c, const char *s, size_t len, const char *ext);
void addReplyHelp(client *c, const char **help);
void addReplySubcommandSyntaxError(client *c);
sds catClientInfoString(sds s, client *c);
void clientCommand(client *c);
void helloCommand(client *c);
void authCommand(client *c);
int getLongLongFromObjectOrReply(client *c, sds o, long long *target, const char *msg);
int getPositiveLongFromObjectOrReply(client *c, sds o, long long *target, const char *msg);
int checkClientOutputBufferLimits(client *c);

/* config.c */
void initConfigValues(void);
int loadServerConfig(const char *filename, int argc, char **argv, char *err, size_t errlen);
void configCommand(client *c);
sds configGetValueString(const char *name);

/* slowlog.c */
void slowlogInit(void);
void slowlogPushEntryIfNeeded(client *c, sds *argv, int argc, long long duration);
void slowlogCommand(client *c);
void slowlogReset(void);

/* latencymon.c */
void latencyMonitorSample(const char *event, long long ms);
void latencyCommand(client *c);

/* info.c */
sds genInfoString(const char *section);
void busyPollConfigChanged(void);
sds busyPollInfo(sds s);
void infoCommand(client *c);
void resetServerStats(void);
void statsSampleInstantaneous(void); /* the cron's 100 ms samples behind INFO's instantaneous_* */

/* Command handlers. */
void pingCommand(client *c);
void echoCommand(client *c);
void selectCommand(client *c);
void swapdbCommand(client *c);
void lastsaveCommand(client *c);
void saveCommand(client *c);
void bgsaveCommand(client *c);
void syncCommand(client *c);
void moduleCommand(client *c);
void quitCommand(client *c);
void resetCommand(client *c);
void commandCommand(client *c);
void timeCommand(client *c);
void shutdownCommand(client *c);
void debugCommand(client *c);
void setCommand(client *c);
void setnxCommand(client *c);
void setexCommand(client *c);
void psetexCommand(client *c);
void getsetCommand(client *c);
void getCommand(client *c);
void getexCommand(client *c);
void getdelCommand(client *c);
void getrangeCommand(client *c);
void strlenCommand(client *c);
void mgetCommand(client *c);
void msetCommand(client *c);
void msetnxCommand(client *c);
void appendCommand(client *c);
void setrangeCommand(client *c);
void incrCommand(client *c);
void decrCommand(client *c);
void incrbyCommand(client *c);
void decrbyCommand(client *c);
void incrbyfloatCommand(client *c);
void setbitCommand(client *c);
void getbitCommand(client *c);
void bitcountCommand(client *c);
void bitposCommand(client *c);
void lcsCommand(client *c);
/* max-key-size, for every command that creates a key (t_string.c). */
int checkKeyLength(client *c, sds key);
void delCommand(client *c);
void existsCommand(client *c);
void typeCommand(client *c);
void touchCommand(client *c);
void randomkeyCommand(client *c);
void renameCommand(client *c);
void renamenxCommand(client *c);
void copyCommand(client *c);
void objectCommand(client *c);
void memoryCommand(client *c);
void leaseReleaseCommand(client *c);
void holdReplicasCommand(client *c);
void holdReleaseCommand(client *c);
void clientHoldsFree(client *c);
int clientHoldCount(const client *c);
void clientLeasesPrune(client *c, int all);
void clientShrinkIdleBuffers(client *c);
void statsRecordError(const char *reply, size_t len); /* info.c: INFO errorstats */
size_t clientMemoryUsage(client *c); /* all: on disconnect, without releasing */
size_t memoryUsedUpdatePeak(void);    /* db.c: used_memory, raising the peak */
size_t memoryExpectedResident(void);  /* db.c: heap + pool pages touched (fragmentation's base) */
void scanCommand(client *c);
void keysCommand(client *c);
void dbsizeCommand(client *c);
void flushallCommand(client *c);
void expireCommand(client *c);
void pexpireCommand(client *c);
void expireatCommand(client *c);
void pexpireatCommand(client *c);
void expiretimeCommand(client *c);
void pexpiretimeCommand(client *c);
void ttlCommand(client *c);
void pttlCommand(client *c);
void persistCommand(client *c);
void putStartCommand(client *c);
void putEndCommand(client *c);
void putRevokeCommand(client *c);
void getReplicasCommand(client *c);
void leaseCommand(client *c);
void pinCommand(client *c);
void unpinCommand(client *c);
void removeCommand(client *c);
void removeAllCommand(client *c);
/* REMOVE.ALL and FLUSHALL of a tenant: the keys c's user may write, and
 * their pending puts; how many keys went. */
long long removeAllWritable(client *c);
void objectInfoCommand(client *c);
void batchPutStartCommand(client *c);
void batchPutEndCommand(client *c);
void batchGetReplicasCommand(client *c);
void batchExistsCommand(client *c);
void replicaClearCommand(client *c);
void storeCommandStatsReset(void);
sds storeCommandStatsInfo(sds s);
void storeDropAskedPuts(client *c, sds *argv, const int *keys, int nkeys);
void mountCommand(client *c);
void unmountCommand(client *c);
void segmentsCommand(client *c);
void segmentInfoCommand(client *c);
void segmentTokenCommand(client *c);
void heartbeatCommand(client *c);
uint64_t segmentUnmount(struct segment *s);
struct aofSegment;
/* Loading the log: a client segment it names, SEG_DETACHED until its owner
 * mounts it again with its identity (t_segment.c). -1: not restorable. */
int segmentRestoreFromLog(const struct aofSegment *g);
void segmentCron(void);
char *setBigArgProc(client *c, int argi, size_t len);
char *setexBigArgProc(client *c, int argi, size_t len);
char *msetBigArgProc(client *c, int argi, size_t len);
char *segWriteBigArgProc(client *c, int argi, size_t len);
void segWriteCommand(client *c);
void segReadCommand(client *c);
void segWritevCommand(client *c);
void segReadvCommand(client *c);
void shmAttachCommand(client *c);
void dataPlaneSetSelfEndpoints(void);
void addReplyPoolBytes(client *c, struct storeObj *o, const char *p, size_t len);
/* relay.c: bytes of a value held only in a mounted segment, from its
 * host. C_ERR / NULL: the client was sent the error, or is blocked until
 * they come and its command runs again (relay.h); return at once. */
int addReplyRemoteBytes(client *c, struct storeObj *o, uint64_t off, uint64_t len);
const char *storeObjFetch(client *c, struct storeObj *o, uint64_t off, uint64_t len);
/* cluster.c */
void clusterCommand(client *c);
void askingCommand(client *c);
void readonlyCommand(client *c);
void psyncCommand(client *c);
void replconfCommand(client *c);
void waitCommand(client *c);
void roleCommand(client *c);
void clientQueueWrite(client *c); /* replies queued while held go out now */
void readwriteCommand(client *c);
/* migrate.c */
void dumpCommand(client *c);
void restoreCommand(client *c);
void migrateCommand(client *c);
/* multi.c */
void multiCommand(client *c);
void execCommand(client *c);
void discardCommand(client *c);
void watchCommand(client *c);
void unwatchCommand(client *c);
/* monitor.c */
void monitorCommand(client *c);
/* pubsub.c */
void subscribeCommand(client *c);
void unsubscribeCommand(client *c);
void psubscribeCommand(client *c);
void punsubscribeCommand(client *c);
void ssubscribeCommand(client *c);
void sunsubscribeCommand(client *c);
void publishCommand(client *c);
void spublishCommand(client *c);
void pubsubCommand(client *c);
/* networking.c: blocked clients (cluster topology changes wait for etcd,
 * relayed reads for a segment's host) */
void blockClient(client *c, struct clusterOp *op);
/* CLIENT PAUSE: blocks c's command (and what it pipelined) if the pause
 * covers it (1), else 0; pauseClients starts or extends a pause,
 * unpauseClients ends it; the paused commands run from beforeSleep. */
enum { PAUSE_NONE = 0, PAUSE_WRITE = 1, PAUSE_ALL = 2 };
int pauseBlocksCommand(client *c);
void pauseClients(int type, long long end_ms);
void unpauseClients(void);
void pauseClientGone(client *c);
void pauseBeforeSleep(void);
/* 1 while a pause (WRITE or ALL) holds the dataset still: no key is
 * expired (lazily or by the cron) or evicted meanwhile, as in Redis. */
int pauseHoldsDataset(void);
void unblockClient(client *c);
void resumeBlockedCommand(client *c);

#endif
