/* commands.c -- the command table.
 *
 * One row per command: handler, arity (negative = at least), flags, key
 * positions, documentation. Dispatch, COMMAND INFO/DOCS/GETKEYS/COUNT/LIST
 * and cluster routing by clients (redis-py reads first/last/step) all derive
 * from this table, so adding a command is adding a row. Containers (CONFIG,
 * CLIENT, ...) list their subcommands; the container's handler dispatches
 * on argv[1], and COMMAND shows the subcommands as Redis 7 does.
 *
 * `bigarg` names the hook that places a large argument before its bytes
 * arrive (networking.c): SET and MSET read values straight into the pool.
 *
 * CMD_NO_MULTI (X below) marks the commands refused between MULTI and
 * EXEC because they cannot finish inside EXEC; multi.c lists them and why.
 * A command that turns the connection into a stream (SUBSCRIBE) belongs
 * there too.
 *
 * The arguments COMMAND DOCS lists (what redis-cli shows as help and hints)
 * come from commandSynopses, one synopsis per command beside the table,
 * parsed and checked against the table's arity and key specs when the
 * server starts (populateCommandDocs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server.h"
#include "util.h"
#include "zmalloc.h"
#include "cluster.h"
#include "acl.h"
#include "aof.h"

#define W CMD_WRITE
#define R CMD_READONLY
#define M CMD_DENYOOM
#define A CMD_ADMIN
#define N CMD_NOAUTH
#define F CMD_FAST
#define L CMD_LOADING
#define S CMD_STALE
#define X CMD_NO_MULTI
#define P CMD_PUBSUB
#define NS CMD_NOSCRIPT

/* name, proc, arity, flags, first, last, step, group, summary, since, complexity, bigarg, subs */
/* Designated initializers: the fields filled at start-up (stats, docs,
 * latency) start zeroed, and adding one touches no row. */
#define SUB(name_, proc_, arity_, flags_, summary_) \
    {.name = name_, .proc = proc_, .arity = arity_, .flags = flags_, .summary = summary_, .since = "1.0.0", \
     .complexity = "O(1)"}
/* A subcommand that takes keys (MEMORY USAGE key): routed and ACL-checked by them. */
#define SUBK(name_, proc_, arity_, flags_, first_, last_, step_, summary_, since_, cx_) \
    {.name = name_, .proc = proc_, .arity = arity_, .flags = flags_, .firstkey = first_, .lastkey = last_, \
     .keystep = step_, .summary = summary_, .since = since_, .complexity = cx_}
#define END {.name = NULL}

static serverCommand configSubcommands[] = {
    SUB("get", configCommand, -3, A | L | S, "Returns the effective values of configuration parameters."),
    SUB("set", configCommand, -4, A | L | S, "Sets configuration parameters in-flight."),
    SUB("resetstat", configCommand, 2, A | L | S, "Resets the server's statistics."),
    SUB("rewrite", configCommand, 2, A | L | S, "Persists the effective configuration to file."),
    SUB("help", configCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static serverCommand clientSubcommands[] = {
    SUB("id", clientCommand, 2, L | S, "Returns the unique client ID of the connection."),
    SUB("setname", clientCommand, 3, L | S, "Sets the connection name."),
    SUB("getname", clientCommand, 2, L | S, "Returns the name of the connection."),
    SUB("list", clientCommand, -2, A | L | S, "Lists open connections."),
    SUB("info", clientCommand, 2, L | S, "Returns information about the connection."),
    SUB("kill", clientCommand, -3, A | L | S, "Terminates open connections."),
    SUB("setinfo", clientCommand, 4, L | S, "Sets information specific to the client or connection."),
    SUB("no-touch", clientCommand, 3, L | S, "Controls whether commands sent by the client affect the LRU/LFU of accessed keys."),
    SUB("no-evict", clientCommand, 3, A | L | S, "Sets the client eviction mode of the connection."),
    {.name = "pause", .proc = clientCommand, .arity = -3, .flags = A | L | S, .since = "3.0.0",
     .summary = "Suspends commands processing.", .complexity = "O(1)"},
    {.name = "unpause", .proc = clientCommand, .arity = 2, .flags = A | L | S, .since = "6.2.0",
     .summary = "Resumes processing commands from paused clients.", .complexity = "O(N) Where N is the number of paused clients"},
    {.name = "reply", .proc = clientCommand, .arity = 3, .flags = L | S,
     .summary = "Instructs the server whether to reply to commands.", .since = "3.2.0", .complexity = "O(1)"},
    {.name = "getredir", .proc = clientCommand, .arity = 2, .flags = L | S, .since = "6.0.0",
     .summary = "Returns the client ID to which the connection's tracking notifications are redirected.",
     .complexity = "O(1)"},
    {.name = "trackinginfo", .proc = clientCommand, .arity = 2, .flags = L | S, .since = "6.2.0",
     .summary = "Returns information about server-assisted client-side caching for the connection.",
     .complexity = "O(1)"},
    SUB("help", clientCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static serverCommand commandSubcommands[] = {
    SUB("count", commandCommand, 2, L | S, "Returns a count of commands."),
    SUB("info", commandCommand, -2, L | S, "Returns information about one, multiple or all commands."),
    SUB("docs", commandCommand, -2, L | S, "Returns documentary information about one, multiple or all commands."),
    SUB("list", commandCommand, -2, L | S, "Returns a list of command names."),
    /* -4, as Redis 7.0: a command name and at least one argument. */
    SUB("getkeys", commandCommand, -4, L | S, "Extracts the key names from an arbitrary command."),
    {.name = "getkeysandflags", .proc = commandCommand, .arity = -4, .flags = L | S, .since = "7.0.0",
     .summary = "Extracts the key names and access flags for an arbitrary command.",
     .complexity = "O(N) where N is the number of arguments to the command"},
    SUB("help", commandCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static serverCommand slowlogSubcommands[] = {
    SUB("get", slowlogCommand, -2, A | L | S, "Returns the slow log's entries."),
    SUB("len", slowlogCommand, 2, A | L | S, "Returns the number of entries in the slow log."),
    SUB("reset", slowlogCommand, 2, A | L | S, "Clears all entries from the slow log."),
    SUB("help", slowlogCommand, 2, L | S, "Show helpful text about the different subcommands."),
    END};

static serverCommand memorySubcommands[] = {
    SUBK("usage", memoryCommand, -3, R, 2, 2, 1, "Estimates the memory usage of a key.", "4.0.0",
         "O(N) where N is the number of samples."),
    SUB("doctor", memoryCommand, 2, 0, "Outputs a memory problems report."),
    SUB("malloc-stats", memoryCommand, 2, 0, "Returns the allocator statistics."),
    SUB("purge", memoryCommand, 2, 0, "Asks the allocator to release memory."),
    SUB("stats", memoryCommand, 2, 0, "Returns details about memory usage."),
    SUB("help", memoryCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

/* LATENCY (latencymon.c): admin, as Redis's, but for HELP. */
static serverCommand latencySubcommands[] = {
    SUB("doctor", latencyCommand, 2, A | L | S, "Returns a human-readable latency analysis report."),
    {.name = "histogram", .proc = latencyCommand, .arity = -2, .flags = A | L | S, .since = "7.0.0",
     .summary = "Returns the cumulative distribution of latencies of a subset or all commands.",
     .complexity = "O(N) where N is the number of commands with latency information being retrieved."},
    {.name = "history", .proc = latencyCommand, .arity = 3, .flags = A | L | S, .since = "2.8.13",
     .summary = "Returns timestamp-latency samples for an event.", .complexity = "O(1)"},
    {.name = "latest", .proc = latencyCommand, .arity = 2, .flags = A | L | S, .since = "2.8.13",
     .summary = "Returns the latest latency samples for all events.", .complexity = "O(1)"},
    {.name = "reset", .proc = latencyCommand, .arity = -2, .flags = A | L | S, .since = "2.8.13",
     .summary = "Resets the latency data for one or more events.", .complexity = "O(1)"},
    SUB("help", latencyCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static serverCommand moduleSubcommands[] = {
    SUB("list", moduleCommand, 2, A, "Returns all loaded modules (none: nothing is loadable yet)."),
    SUB("load", moduleCommand, -3, A, "Loads a module (refused: nothing is loadable yet)."),
    {.name = "loadex", .proc = moduleCommand, .arity = -3, .flags = A, .since = "7.0.0",
     .summary = "Loads a module using extended parameters (refused: nothing is loadable yet).", .complexity = "O(1)"},
    SUB("unload", moduleCommand, 3, A, "Unloads a module."),
    SUB("help", moduleCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static serverCommand objectSubcommands[] = {
    SUBK("encoding", objectCommand, 3, R, 2, 2, 1, "Returns the internal encoding of a Redis object.", "2.2.3", "O(1)"),
    SUBK("freq", objectCommand, 3, R, 2, 2, 1, "Returns the logarithmic access frequency counter of a Redis object.", "4.0.0", "O(1)"),
    SUBK("idletime", objectCommand, 3, R, 2, 2, 1, "Returns the time since the last access to a Redis object.", "2.2.3", "O(1)"),
    SUBK("refcount", objectCommand, 3, R, 2, 2, 1, "Returns the reference count of a value of a key.", "2.2.3", "O(1)"),
    SUB("help", objectCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

/* ACL (acl.c): admin subcommands are @admin @dangerous, as Redis's; CAT,
 * WHOAMI and GENPASS are open to anyone who may run ACL at all. */
static serverCommand aclSubcommands[] = {
    SUB("cat", aclCommand, -2, L | S, "Lists the ACL categories, or the commands inside a category."),
    SUB("deluser", aclCommand, -3, A | L | S, "Deletes ACL users, and terminates their connections."),
    SUB("dryrun", aclCommand, -4, A | L | S, "Simulates the execution of a command by a user, without executing the command."),
    SUB("genpass", aclCommand, -2, L | S, "Generates a pseudorandom, secure password that can be used to identify ACL users."),
    SUB("getuser", aclCommand, 3, A | L | S, "Lists the ACL rules of a user."),
    SUB("list", aclCommand, 2, A | L | S, "Dumps the effective rules in ACL file format."),
    SUB("load", aclCommand, 2, A | L | S, "Reloads the rules from the configured ACL file."),
    SUB("log", aclCommand, -2, A | L | S, "Lists recent security events generated due to ACL rules."),
    SUB("save", aclCommand, 2, A | L | S, "Saves the effective ACL rules in the configured ACL file."),
    SUB("setuser", aclCommand, -3, A | L | S, "Creates and modifies an ACL user and its rules."),
    SUB("users", aclCommand, 2, A | L | S, "Lists all ACL users."),
    SUB("whoami", aclCommand, 2, L | S, "Returns the authenticated username of the current connection."),
    SUB("help", aclCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static serverCommand pubsubSubcommands[] = {
    {.name = "channels", .proc = pubsubCommand, .arity = -2, .flags = P | L | S, .since = "2.8.0",
     .summary = "Returns the active channels.",
     .complexity = "O(N) where N is the number of active channels, and assuming constant time pattern matching "
                   "(relatively short channels and patterns)"},
    {.name = "numsub", .proc = pubsubCommand, .arity = -2, .flags = P | L | S, .since = "2.8.0",
     .summary = "Returns a count of subscribers to channels.",
     .complexity = "O(N) for the NUMSUB subcommand, where N is the number of requested channels"},
    {.name = "numpat", .proc = pubsubCommand, .arity = 2, .flags = P | L | S, .since = "2.8.0",
     .summary = "Returns a count of unique pattern subscriptions.", .complexity = "O(1)"},
    {.name = "shardchannels", .proc = pubsubCommand, .arity = -2, .flags = P | L | S, .since = "7.0.0",
     .summary = "Returns the active shard channels.",
     .complexity = "O(N) where N is the number of active shard channels, and assuming constant time pattern "
                   "matching (relatively short shard channels)."},
    {.name = "shardnumsub", .proc = pubsubCommand, .arity = -2, .flags = P | L | S, .since = "7.0.0",
     .summary = "Returns the count of subscribers of shard channels.",
     .complexity = "O(N) for the SHARDNUMSUB subcommand, where N is the number of requested shard channels"},
    {.name = "help", .proc = pubsubCommand, .arity = 2, .flags = L | S, .since = "6.2.0",
     .summary = "Returns helpful text about the different subcommands.", .complexity = "O(1)"},
    END};

static serverCommand clusterSubcommands[] = {
    SUB("info", clusterCommand, 2, S, "Returns information about the state of a node."),
    SUB("myid", clusterCommand, 2, S, "Returns the ID of a node."),
    SUB("myshardid", clusterCommand, 2, S, "Returns the shard ID of a node."),
    SUB("nodes", clusterCommand, 2, S, "Returns the cluster configuration for a node."),
    SUB("slots", clusterCommand, 2, S, "Returns the mapping of cluster slots to nodes."),
    SUB("shards", clusterCommand, 2, S, "Returns the mapping of cluster slots to shards."),
    SUB("keyslot", clusterCommand, 3, S, "Returns the hash slot for a key."),
    SUB("countkeysinslot", clusterCommand, 3, S, "Returns the number of keys in a hash slot."),
    SUB("getkeysinslot", clusterCommand, 4, S, "Returns the key names in a hash slot."),
    SUB("addslots", clusterCommand, -3, A | S | X, "Assigns new hash slots to a node."),
    SUB("addslotsrange", clusterCommand, -4, A | S | X, "Assigns new hash slot ranges to a node."),
    SUB("delslots", clusterCommand, -3, A | S | X, "Sets hash slots as unbound for a node."),
    SUB("delslotsrange", clusterCommand, -4, A | S | X, "Sets hash slot ranges as unbound for a node."),
    SUB("setslot", clusterCommand, -4, A | S | X, "Binds a hash slot to a node."),
    SUB("meet", clusterCommand, -4, A | S | X, "Forces a node to handshake with another node."),
    SUB("forget", clusterCommand, 3, A | S | X, "Removes a node from the nodes table."),
    SUB("reset", clusterCommand, -2, A | S | X, "Resets a node."),
    SUB("set-config-epoch", clusterCommand, 3, A | S | X, "Sets the configuration epoch for a new node."),
    SUB("bumpepoch", clusterCommand, 2, A | S | X, "Advances the cluster config epoch."),
    SUB("saveconfig", clusterCommand, 2, A | S, "Forces a node to save the cluster configuration to disk."),
    SUB("replicate", clusterCommand, 3, A | S, "Configure a node as replica of a primary node."),
    SUB("replicas", clusterCommand, 3, A | S, "Lists the replica nodes of a primary node."),
    SUB("slaves", clusterCommand, 3, A | S, "Lists the replica nodes of a primary node."),
    SUB("count-failure-reports", clusterCommand, 3, A | S, "Returns the number of active failure reports active for a node."),
    SUB("failover", clusterCommand, -2, A | S, "Forces a replica to perform a manual failover of its primary."),
    SUB("links", clusterCommand, 2, S, "Returns a list of all TCP links to and from peer nodes."),
    SUB("help", clusterCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

#define CMD(name_, proc_, arity_, flags_, first_, last_, step_, group_, summary_, since_, cx_) \
    CMDX(name_, proc_, arity_, flags_, first_, last_, step_, group_, summary_, since_, cx_, NULL, NULL)
#define CMDX(name_, proc_, arity_, flags_, first_, last_, step_, group_, summary_, since_, cx_, bigarg_, subs_) \
    {.name = name_, .proc = proc_, .arity = arity_, .flags = flags_, .firstkey = first_, .lastkey = last_, \
     .keystep = step_, .group = group_, .summary = summary_, .since = since_, .complexity = cx_, .bigarg = bigarg_, \
     .subcommands = subs_}

serverCommand commandTable[] = {
    /* connection */
    CMD("ping", pingCommand, -1, F | S | L, 0, 0, 0, "connection", "Returns the server's liveliness response.", "1.0.0", "O(1)"),
    CMD("echo", echoCommand, 2, F | S | L, 0, 0, 0, "connection", "Returns the given string.", "1.0.0", "O(1)"),
    CMD("hello", helloCommand, -1, N | F | S | L, 0, 0, 0, "connection", "Handshakes with the server.", "6.0.0", "O(1)"),
    CMD("auth", authCommand, -2, N | F | S | L, 0, 0, 0, "connection", "Authenticates the connection.", "1.0.0", "O(N) where N is the number of passwords defined for the user"),
    CMD("select", selectCommand, 2, F | S | L, 0, 0, 0, "connection", "Changes the selected database (only 0 exists).", "1.0.0", "O(1)"),
    CMD("quit", quitCommand, -1, N | F | S | L, 0, 0, 0, "connection", "Closes the connection.", "1.0.0", "O(1)"),
    CMD("reset", resetCommand, 1, N | F | S | L, 0, 0, 0, "connection", "Resets the connection.", "6.2.0", "O(1)"),
    CMDX("client", clientCommand, -2, S | L, 0, 0, 0, "connection", "A container for client connection commands.", "2.4.0", "Depends on subcommand.", NULL, clientSubcommands),
    /* transactions (multi.c) */
    CMD("multi", multiCommand, 1, F | L | S, 0, 0, 0, "transactions", "Starts a transaction.", "1.2.0", "O(1)"),
    CMD("exec", execCommand, 1, L | S | CMD_SKIP_SLOWLOG, 0, 0, 0, "transactions", "Executes all commands in a transaction.", "1.2.0", "Depends on commands in the transaction"),
    CMD("discard", discardCommand, 1, F | L | S, 0, 0, 0, "transactions", "Discards a transaction.", "2.0.0", "O(N), when N is the number of queued commands"),
    CMD("watch", watchCommand, -2, F | L | S, 1, -1, 1, "transactions", "Monitors changes to keys to determine the execution of a transaction.", "2.2.0", "O(1) for every key."),
    CMD("unwatch", unwatchCommand, 1, F | L | S, 0, 0, 0, "transactions", "Forgets about watched keys of a transaction.", "2.2.0", "O(1)"),
    /* server */
    CMDX("command", commandCommand, -1, S | L, 0, 0, 0, "server", "Returns detailed information about all commands.", "2.8.13", "O(N) where N is the total number of commands", NULL, commandSubcommands),
    CMD("info", infoCommand, -1, S | L, 0, 0, 0, "server", "Returns information and statistics about the server.", "1.0.0", "O(1)"),
    CMDX("memory", memoryCommand, -2, 0, 0, 0, 0, "server", "A container for memory diagnostics commands.", "4.0.0", "Depends on subcommand.", NULL, memorySubcommands),
    CMDX("config", configCommand, -2, 0, 0, 0, 0, "server", "A container for server configuration commands.", "2.0.0", "Depends on subcommand.", NULL, configSubcommands),
    CMD("time", timeCommand, 1, F | S | L, 0, 0, 0, "server", "Returns the server time.", "2.6.0", "O(1)"),
    CMD("dbsize", dbsizeCommand, 1, R | F, 0, 0, 0, "server", "Returns the number of keys in the database.", "1.0.0", "O(1)"),
    CMD("swapdb", swapdbCommand, 3, W | F, 0, 0, 0, "server", "Swaps two Redis databases (only 0 exists: SWAPDB 0 0).", "4.0.0", "O(N) where N is the count of clients watching or blocking on keys from both databases."),
    CMD("lastsave", lastsaveCommand, 1, L | S | F, 0, 0, 0, "server", "Returns the Unix timestamp of the last successful save to disk (no RDB: the server's start).", "1.0.0", "O(1)"),
    CMD("save", saveCommand, 1, A | X, 0, 0, 0, "server", "Synchronously saves the database(s) to disk (refused: the AOF is the persistence).", "1.0.0", "O(N) where N is the total number of keys in all databases"),
    CMDX("module", moduleCommand, -2, 0, 0, 0, 0, "server", "A container for module commands.", "4.0.0", "Depends on subcommand.", NULL, moduleSubcommands),
    CMD("sync", syncCommand, 1, A | X, 0, 0, 0, "server", "An internal command used in replication (refused: no RDB snapshots).", "1.0.0", NULL),
    CMD("bgsave", bgsaveCommand, -1, A, 0, 0, 0, "server", "Asynchronously saves the database(s) to disk (refused: the AOF is the persistence).", "1.0.0", "O(N) where N is the total number of keys in all databases"),
    CMD("bgrewriteaof", bgrewriteaofCommand, 1, A, 0, 0, 0, "server", "Asynchronously rewrites the append-only file to disk.", "1.0.0", "O(1)"),
    CMD("flushall", flushallCommand, -1, W, 0, 0, 0, "server", "Removes all keys.", "1.0.0", "O(N) where N is the total number of keys"),
    CMD("flushdb", flushallCommand, -1, W, 0, 0, 0, "server", "Removes all keys (there is one database).", "1.0.0", "O(N) where N is the number of keys"),
    CMD("shutdown", shutdownCommand, -1, A | L | S | X, 0, 0, 0, "server", "Stops the server.", "1.0.0", "O(N) when saving, where N is the total number of keys"),
    CMDX("latency", latencyCommand, -2, 0, 0, 0, 0, "server", "A container for latency diagnostics commands.", "2.8.13", "Depends on subcommand.", NULL, latencySubcommands),
    CMDX("slowlog", slowlogCommand, -2, A, 0, 0, 0, "server", "A container for slow log commands.", "2.2.12", "Depends on subcommand.", NULL, slowlogSubcommands),
    CMD("debug", debugCommand, -2, A | L | S, 0, 0, 0, "server", "A container for debugging commands.", "1.0.0", "Depends on subcommand."),
    CMDX("acl", aclCommand, -2, S | L, 0, 0, 0, "server", "A container for Access List Control commands.", "6.0.0", "Depends on subcommand.", NULL, aclSubcommands),
    CMD("monitor", monitorCommand, 1, A | L | S, 0, 0, 0, "server", "Listens for all requests received by the server in real-time.", "1.0.0", NULL),
    /* pubsub (pubsub.c). SSUBSCRIBE, SUNSUBSCRIBE and SPUBLISH name shard
     * channels where keys go, so cluster mode routes them by slot. */
    CMD("subscribe", subscribeCommand, -2, P | NS | L | S, 0, 0, 0, "pubsub", "Listens for messages published to channels.", "2.0.0", "O(N) where N is the number of channels to subscribe to."),
    CMD("psubscribe", psubscribeCommand, -2, P | NS | L | S, 0, 0, 0, "pubsub", "Listens for messages published to channels that match one or more patterns.", "2.0.0", "O(N) where N is the number of patterns to subscribe to."),
    CMD("ssubscribe", ssubscribeCommand, -2, P | NS | L | S, 1, -1, 1, "pubsub", "Listens for messages published to shard channels.", "7.0.0", "O(N) where N is the number of shard channels to subscribe to."),
    CMD("unsubscribe", unsubscribeCommand, -1, P | NS | L | S, 0, 0, 0, "pubsub", "Stops listening to messages posted to channels.", "2.0.0", "O(N) where N is the number of channels to unsubscribe."),
    CMD("punsubscribe", punsubscribeCommand, -1, P | NS | L | S, 0, 0, 0, "pubsub", "Stops listening to messages published to channels that match one or more patterns.", "2.0.0", "O(N) where N is the number of patterns to unsubscribe."),
    CMD("sunsubscribe", sunsubscribeCommand, -1, P | NS | L | S, 1, -1, 1, "pubsub", "Stops listening to messages posted to shard channels.", "7.0.0", "O(N) where N is the number of shard channels to unsubscribe."),
    CMD("publish", publishCommand, 3, P | L | S | F, 0, 0, 0, "pubsub", "Posts a message to a channel (this node's subscribers).", "2.0.0", "O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client)."),
    CMD("spublish", spublishCommand, 3, P | L | S | F, 1, 1, 1, "pubsub", "Posts a message to a shard channel.", "7.0.0", "O(N) where N is the number of clients subscribed to the receiving shard channel."),
    CMDX("pubsub", pubsubCommand, -2, 0, 0, 0, 0, "pubsub", "A container for Pub/Sub commands.", "2.8.0", "Depends on subcommand.", NULL, pubsubSubcommands),
    /* cluster (cluster.c) */
    CMDX("cluster", clusterCommand, -2, S | L, 0, 0, 0, "cluster", "A container for Redis Cluster commands.", "3.0.0", "Depends on subcommand.", NULL, clusterSubcommands),
    CMD("asking", askingCommand, 1, F, 0, 0, 0, "cluster", "Signals that a cluster client is following an -ASK redirect.", "3.0.0", "O(1)"),
    CMD("psync", psyncCommand, -3, A | S | X, 0, 0, 0, "server", "An internal command used in replication.", "2.8.0", "O(N) in the keys, for the full sync"),
    CMD("wait", waitCommand, 3, 0, 0, 0, 0, "generic", "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.", "3.0.0", "O(1)"),
    CMD("role", roleCommand, 1, A | F | S | L, 0, 0, 0, "server", "Returns the replication role.", "2.8.12", "O(1)"),
    CMD("replconf", replconfCommand, -2, A | S | L, 0, 0, 0, "server", "An internal command for configuring the replication stream.", "3.0.0", "O(1)"),
    CMD("readonly", readonlyCommand, 1, F | L | S, 0, 0, 0, "cluster", "Enables read-only queries for a connection to a Redis Cluster replica node.", "3.0.0", "O(1)"),
    CMD("readwrite", readwriteCommand, 1, F | L | S, 0, 0, 0, "cluster", "Enables read-write queries for a connection to a Redis Cluster replica node.", "3.0.0", "O(1)"),
    /* migration (migrate.c) */
    CMD("dump", dumpCommand, 2, R, 1, 1, 1, "generic", "Returns a serialized representation of the value stored at a key.", "2.6.0", "O(1) to access the key and additional O(N*M) to serialize it"),
    CMD("restore", restoreCommand, -4, W | M, 1, 1, 1, "generic", "Creates a key from the serialized representation of a value.", "2.6.0", "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value"),
    CMD("restore-asking", restoreCommand, -4, W | M | CMD_ASKING, 1, 1, 1, "server", "An internal command for migrating keys in a cluster.", "3.0.0", "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value"),
    CMD("migrate", migrateCommand, -6, W | CMD_MOVABLEKEYS, 3, 3, 1, "generic", "Atomically transfers keys from one instance to another.", "2.6.0", "O(N) where N is the number of keys"),
    /* keyspace */
    CMD("del", delCommand, -2, W, 1, -1, 1, "generic", "Deletes one or more keys.", "1.0.0", "O(N) where N is the number of keys that will be removed"),
    CMD("unlink", delCommand, -2, W | F, 1, -1, 1, "generic", "Deletes one or more keys (space is reclaimed when no reader holds it).", "4.0.0", "O(1) for each key removed"),
    CMD("exists", existsCommand, -2, R | F, 1, -1, 1, "generic", "Determines whether one or more keys exist.", "1.0.0", "O(N) where N is the number of keys to check"),
    CMD("type", typeCommand, 2, R | F, 1, 1, 1, "generic", "Determines the type of value stored at a key.", "1.0.0", "O(1)"),
    CMD("touch", touchCommand, -2, R | F, 1, -1, 1, "generic", "Returns the number of existing keys out of those specified after updating the time they were last accessed.", "3.2.1", "O(N) where N is the number of keys that will be touched."),
    CMD("randomkey", randomkeyCommand, 1, R, 0, 0, 0, "generic", "Returns a random key name from the database.", "1.0.0", "O(1)"),
    CMD("rename", renameCommand, 3, W, 1, 2, 1, "generic", "Renames a key and overwrites the destination.", "1.0.0", "O(1)"),
    CMD("renamenx", renamenxCommand, 3, W | F, 1, 2, 1, "generic", "Renames a key only when the target key name doesn't exist.", "1.0.0", "O(1)"),
    CMD("copy", copyCommand, -3, W | M, 1, 2, 1, "generic", "Copies the value of a key to a new key.", "6.2.0", "O(N) where N is the length of the value: its bytes are copied."),
    CMDX("object", objectCommand, -2, 0, 0, 0, 0, "generic", "A container for object introspection commands.", "2.2.3", "Depends on subcommand.", NULL, objectSubcommands),
    CMD("scan", scanCommand, -2, R, 0, 0, 0, "generic", "Iterates over the key names in the database.", "2.8.0", "O(1) for every call. O(N) for a complete iteration"),
    CMD("keys", keysCommand, 2, R, 0, 0, 0, "generic", "Returns all key names that match a pattern.", "1.0.0", "O(N) with N being the number of keys in the database"),
    CMD("expire", expireCommand, -3, W | F, 1, 1, 1, "generic", "Sets the expiration time of a key in seconds.", "1.0.0", "O(1)"),
    CMD("pexpire", pexpireCommand, -3, W | F, 1, 1, 1, "generic", "Sets the expiration time of a key in milliseconds.", "2.6.0", "O(1)"),
    CMD("expireat", expireatCommand, -3, W | F, 1, 1, 1, "generic", "Sets the expiration time of a key to a Unix timestamp.", "1.2.0", "O(1)"),
    CMD("pexpireat", pexpireatCommand, -3, W | F, 1, 1, 1, "generic", "Sets the expiration time of a key to a Unix milliseconds timestamp.", "2.6.0", "O(1)"),
    CMD("expiretime", expiretimeCommand, 2, R | F, 1, 1, 1, "generic", "Returns the expiration time of a key as a Unix timestamp.", "7.0.0", "O(1)"),
    CMD("pexpiretime", pexpiretimeCommand, 2, R | F, 1, 1, 1, "generic", "Returns the expiration time of a key as a Unix milliseconds timestamp.", "7.0.0", "O(1)"),
    CMD("ttl", ttlCommand, 2, R | F, 1, 1, 1, "generic", "Returns the expiration time in seconds of a key.", "1.0.0", "O(1)"),
    CMD("pttl", pttlCommand, 2, R | F, 1, 1, 1, "generic", "Returns the expiration time in milliseconds of a key.", "2.6.0", "O(1)"),
    CMD("persist", persistCommand, 2, W | F, 1, 1, 1, "generic", "Removes the expiration time of a key.", "2.2.0", "O(1)"),
    /* segments (Mooncake store) */
    CMD("mount", mountCommand, -3, W, 0, 0, 0, "store", "Mounts a segment of memory a client contributes; returns its id.", "0.1.0", "O(S) where S is the number of segments"),
    CMD("unmount", unmountCommand, -2, W, 0, 0, 0, "store", "Unmounts a segment, at once or after GRACEFUL ms.", "0.1.0", "O(N) where N is the number of replicas on the segment"),
    CMD("segments", segmentsCommand, 1, R, 0, 0, 0, "store", "Describes every mounted segment.", "0.1.0", "O(S)"),
    CMD("segment.info", segmentInfoCommand, 2, R | F, 0, 0, 0, "store", "Describes one segment, by name or id.", "0.1.0", "O(S)"),
    CMD("segment.token", segmentTokenCommand, 2, R | F, 0, 0, 0, "store", "The capability that admits a peer to a segment's host.", "0.5.0", "O(S)"),
    CMD("heartbeat", heartbeatCommand, 2, F, 0, 0, 0, "store", "Keeps an owner's segments mounted.", "0.1.0", "O(1)"),
    /* objects (Mooncake store) */
    CMD("put.start", putStartCommand, -3, W | M, 1, 1, 1, "store", "Reserves replicas for a new object (or version); readers see it after PUT.END.", "0.1.0", "O(S) where S is the number of segments"),
    CMD("put.end", putEndCommand, -2, W | F, 1, 1, 1, "store", "Publishes a pending object, replacing any previous version atomically.", "0.1.0", "O(1)"),
    CMD("put.revoke", putRevokeCommand, 2, W | F, 1, 1, 1, "store", "Abandons a pending put and frees its space.", "0.1.0", "O(1)"),
    CMD("get.replicas", getReplicasCommand, 2, R | F, 1, 1, 1, "store", "Returns an object's replicas under a read lease.", "0.1.0", "O(1)"),
    CMD("lease", leaseCommand, 3, R | F, 1, 1, 1, "store", "Extends the read lease of an object.", "0.1.0", "O(1)"),
    CMD("lease.release", leaseReleaseCommand, -2, R | F, 1, -1, 1, "store", "Ends this connection's read leases on keys it has finished reading.", "0.1.0", "O(N) where N is the number of keys"),
    CMD("pin", pinCommand, -2, W | F, 1, 1, 1, "store", "Protects an object from eviction: for ms (soft) or HARD.", "0.1.0", "O(1)"),
    CMD("unpin", unpinCommand, 2, W | F, 1, 1, 1, "store", "Removes soft and hard pins.", "0.1.0", "O(1)"),
    CMD("remove", removeCommand, -2, W, 1, -1, 1, "store", "Removes objects (and pending puts); space is reused when leases end.", "0.1.0", "O(N)"),
    CMD("remove.all", removeAllCommand, 1, W, 0, 0, 0, "store", "Removes every object and pending put.", "0.1.0", "O(N)"),
    CMD("object.info", objectInfoCommand, 2, R | F, 1, 1, 1, "store", "Describes an object: state, replicas, lease, pins.", "0.1.0", "O(1)"),
    {.name = "batch.put.start", .proc = batchPutStartCommand, .arity = -4, .flags = W | M | CMD_MOVABLEKEYS,
     .group = "store", .summary = "PUT.START for many keys; one result per key.", .since = "0.1.0",
     .complexity = "O(N)", .keynum_idx = 1, .keynum_first = 2, .keynum_step = 2},
    CMD("batch.put.end", batchPutEndCommand, -2, W, 1, -1, 1, "store", "PUT.END for many keys; one result per key.", "0.1.0", "O(N)"),
    CMD("batch.get.replicas", batchGetReplicasCommand, -2, R, 1, -1, 1, "store", "GET.REPLICAS for many keys; one result per key.", "0.1.0", "O(N)"),
    CMD("hold.replicas", holdReplicasCommand, -2, R, 1, -1, 1, "store", "BATCH.GET.REPLICAS whose grants last until HOLD.RELEASE or the connection closes.", "0.1.0", "O(N)"),
    /* Keyless on purpose: a hold belongs to its connection, not to a slot
     * (it is ended on the node that granted it, even after its slot moved
     * or through ASK), and it names only this connection's own grants. */
    CMD("hold.release", holdReleaseCommand, -2, R | F, 0, 0, 0, "store", "Ends this connection's holds on keys it has finished reading.", "0.1.0", "O(N) where N is the number of keys"),
    {.name = "batch.exists", .proc = batchExistsCommand, .arity = -3, .flags = R | F | CMD_MOVABLEKEYS,
     .group = "store", .summary = "Which keys hold a readable object, or how many leading ones do (PREFIX); LEASE grants read leases.",
     .since = "0.4.0", .complexity = "O(N)", .keynum_idx = 1, .keynum_first = 2, .keynum_step = 1},
    {.name = "replica.clear", .proc = replicaClearCommand, .arity = -3, .flags = W | CMD_MOVABLEKEYS,
     .group = "store", .summary = "Drops the replicas of objects no one is reading (all, or those in one segment); 1 or 0 per key.",
     .since = "0.5.0", .complexity = "O(N)", .keynum_idx = 1, .keynum_first = 2, .keynum_step = 1},
    /* strings, in the server's own pool */
    CMDX("seg.write", segWriteCommand, 4, W, 0, 0, 0, "data", "Writes bytes into the extent of a pending object in a segment this server holds.", "0.4.0", "O(N)", segWriteBigArgProc, NULL),
    CMD("seg.read", segReadCommand, 4, R, 0, 0, 0, "data", "Reads bytes from the extent of a complete object in a segment this server holds.", "0.4.0", "O(N)"),
    CMD("seg.writev", segWritevCommand, -4, W, 0, 0, 0, "data", "Writes several ranges, each inside the extent of a pending object, in one segment this server holds; all or none.", "0.4.0", "O(N)"),
    CMD("seg.readv", segReadvCommand, -4, R, 0, 0, 0, "data", "Reads several ranges, each inside the extent of a complete object, from one segment this server holds; all or none.", "0.4.0", "O(N)"),
    CMD("shm.attach", shmAttachCommand, 2, R | X, 0, 0, 0, "data", "Sends the segment's memory file by SCM_RIGHTS (unix socket only).", "0.4.0", "O(1)"),
    CMDX("set", setCommand, -3, W | M, 1, 1, 1, "string", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", "1.0.0", "O(1)", setBigArgProc, NULL),
    CMD("get", getCommand, 2, R | F, 1, 1, 1, "string", "Returns the string value of a key.", "1.0.0", "O(1)"),
    CMD("getrange", getrangeCommand, 4, R, 1, 1, 1, "string", "Returns a substring of the string stored at a key.", "2.4.0", "O(N) where N is the length of the returned string"),
    CMD("substr", getrangeCommand, 4, R, 1, 1, 1, "string", "Returns a substring from a string value (GETRANGE's older name).", "1.0.0", "O(N) where N is the length of the returned string"),
    CMD("strlen", strlenCommand, 2, R | F, 1, 1, 1, "string", "Returns the length of a string value.", "2.2.0", "O(1)"),
    CMD("mget", mgetCommand, -2, R | F, 1, -1, 1, "string", "Atomically returns the string values of one or more keys.", "1.0.0", "O(N) where N is the number of keys to retrieve"),
    CMDX("mset", msetCommand, -3, W | M, 1, -1, 2, "string", "Atomically creates or modifies the string values of one or more keys.", "1.0.1", "O(N) where N is the number of keys to set", msetBigArgProc, NULL),
    CMDX("setnx", setnxCommand, 3, W | M | F, 1, 1, 1, "string", "Set the string value of a key only when the key doesn't exist.", "1.0.0", "O(1)", setBigArgProc, NULL),
    CMDX("setex", setexCommand, 4, W | M, 1, 1, 1, "string", "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.", "2.0.0", "O(1)", setexBigArgProc, NULL),
    CMDX("psetex", psetexCommand, 4, W | M, 1, 1, 1, "string", "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.", "2.6.0", "O(1)", setexBigArgProc, NULL),
    CMDX("getset", getsetCommand, 3, W | M | F, 1, 1, 1, "string", "Returns the previous string value of a key after setting it to a new value.", "1.0.0", "O(1)", setBigArgProc, NULL),
    CMD("getex", getexCommand, -2, W | F, 1, 1, 1, "string", "Returns the string value of a key after setting its expiration time.", "6.2.0", "O(1)"),
    CMD("getdel", getdelCommand, 2, W | F, 1, 1, 1, "string", "Returns the string value of a key after deleting the key.", "6.2.0", "O(1)"),
    CMDX("msetnx", msetnxCommand, -3, W | M, 1, -1, 2, "string", "Atomically modifies the string values of one or more keys only when all keys don't exist.", "1.0.1", "O(N) where N is the number of keys to set.", msetBigArgProc, NULL),
    CMD("append", appendCommand, 3, W | M | F, 1, 1, 1, "string", "Appends a string to the value of a key. Creates the key if it doesn't exist.", "2.0.0", "O(N) where N is the length of the resulting value: a new version is written."),
    CMD("setrange", setrangeCommand, 4, W | M, 1, 1, 1, "string", "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.", "2.2.0", "O(N) where N is the length of the resulting value: a new version is written."),
    CMD("incr", incrCommand, 2, W | M | F, 1, 1, 1, "string", "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "O(1)"),
    CMD("incrby", incrbyCommand, 3, W | M | F, 1, 1, 1, "string", "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "O(1)"),
    CMD("decr", decrCommand, 2, W | M | F, 1, 1, 1, "string", "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "O(1)"),
    CMD("decrby", decrbyCommand, 3, W | M | F, 1, 1, 1, "string", "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "O(1)"),
    CMD("incrbyfloat", incrbyfloatCommand, 3, W | M | F, 1, 1, 1, "string", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.", "2.6.0", "O(1)"),
    CMD("lcs", lcsCommand, -3, R, 1, 2, 1, "string", "Finds the longest common substring.", "7.0.0", "O(N*M) where N and M are the lengths of s1 and s2, respectively"),
    /* bitmaps */
    CMD("setbit", setbitCommand, 4, W | M, 1, 1, 1, "bitmap", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.", "2.2.0", "O(N) where N is the length of the resulting value when a bit changes: a new version is written."),
    CMD("getbit", getbitCommand, 3, R | F, 1, 1, 1, "bitmap", "Returns a bit value by offset.", "2.2.0", "O(1)"),
    CMD("bitcount", bitcountCommand, -2, R, 1, 1, 1, "bitmap", "Counts the number of set bits (population counting) in a string.", "2.6.0", "O(N)"),
    CMD("bitpos", bitposCommand, -3, R, 1, 1, 1, "bitmap", "Finds the first set (1) or clear (0) bit in a string.", "2.8.7", "O(N)"),
    END};

#undef W
#undef R
#undef M
#undef A
#undef N
#undef F
#undef L
#undef S
#undef X
#undef P
#undef NS

/* ---- synopses: the arguments COMMAND DOCS lists --------------------------- */

/* Each command's arguments, written as a synopsis in the shape of Redis's
 * documentation and parsed at start-up into the "arguments" of COMMAND DOCS,
 * which redis-cli 7 turns into its `help` lines and its as-you-type hints.
 * A table of its own rather than a column of commandTable because a
 * synopsis is long and the rows are wide already; the start-up check ties
 * the two together (populateCommandDocs): a name here must be a command,
 * a command that takes arguments must be here, and the words a synopsis
 * requires must agree with the command's arity, so neither can drift.
 *
 * The notation:
 *   name:type          an argument; type is key, string, integer, double,
 *                      pattern or unix-time; name is up to the last ':'
 *                      (so "ip:port:string" is the argument "ip:port")
 *   TOKEN              a literal word (pure-token; "" is the empty string)
 *   TOKEN name:type    an argument introduced by a token (EX seconds)
 *   TOKEN ( ... )      a group introduced by a token (AUTH2 user pass)
 *   [ ... ]            optional
 *   ( ... )            a group: a block of several, or a oneof
 *   a | b              one of (inside [ ] or ( ))
 *   x...               one or more; after a token's [ ] or ( ), the token
 *                      repeats too ([ENDPOINT uri:string]...)
 *   label=             names the group or argument that follows
 * Keys are the key spec COMMAND INFO lists (key_spec_index 0); a command
 * without one writes its key-like arguments as strings, as Redis does for
 * CLUSTER KEYSLOT. An empty synopsis says the command takes no arguments. */
static const struct {
    const char *command;
    const char *synopsis;
} commandSynopses[] = {
    /* connection */
    {"ping", "[message:string]"},
    {"echo", "message:string"},
    {"hello", "arguments=[protover:integer [AUTH username_password=(username:string password:string)] "
              "[SETNAME clientname:string]]"},
    {"auth", "[username:string] password:string"},
    {"select", "index:integer"},
    {"quit", ""},
    {"client|setname", "connection-name:string"},
    {"client|list", "[TYPE client-type=(NORMAL|MASTER|REPLICA|PUBSUB)] [ID client-id:integer...]"},
    {"client|kill", "filter=(ip:port:string|new-format=(ID client-id:integer|TYPE client-type=(NORMAL|MASTER|SLAVE|REPLICA|PUBSUB)|"
                    "USER username:string|ADDR ip:port:string|LADDR ip:port:string|SKIPME yes/no:string)...)"},
    {"client|no-touch", "enabled=(ON|OFF)"},
    {"client|no-evict", "enabled=(ON|OFF)"},
    {"client|setinfo", "attr=(LIB-NAME libname:string|LIB-VER libver:string)"},
    {"client|reply", "on_off_skip=(ON|OFF|SKIP)"},
    {"client|pause", "timeout:integer [mode=(WRITE|ALL)]"},
    /* transactions */
    {"watch", "key:key..."},
    /* server */
    {"command|info", "[command-name:string...]"},
    {"command|docs", "[command-name:string...]"},
    {"command|list", "[FILTERBY filterby=(MODULE module-name:string|ACLCAT category:string|PATTERN pattern:pattern)]"},
    {"command|getkeys", "command:string arg:string [arg:string...]"},
    {"command|getkeysandflags", "command:string arg:string [arg:string...]"},
    {"info", "[section:string...]"},
    {"psync", "replicationid:string offset:integer"},
    {"replconf", "option:string [value:string...]"},
    {"wait", "numreplicas:integer timeout:integer"},
    {"config|get", "parameter:string..."},
    {"config|set", "parameter_value=(parameter:string value:string)..."},
    {"bgrewriteaof", ""},
    {"swapdb", "index1:integer index2:integer"},
    {"lastsave", ""},
    {"save", ""},
    {"sync", ""},
    {"module|load", "path:string [arg:string...]"},
    {"module|loadex", "path:string [CONFIG configs=(name:string value:string)...] [ARGS args:string...]"},
    {"module|unload", "name:string"},
    {"bgsave", "[SCHEDULE]"},
    {"flushall", "async=[ASYNC|SYNC]"},
    {"flushdb", "async=[ASYNC|SYNC]"},
    {"shutdown", "[NOSAVE|SAVE] [NOW] [FORCE] [ABORT]"},
    {"slowlog|get", "[count:integer]"},
    {"latency|histogram", "[command:string...]"},
    {"latency|history", "event:string"},
    {"latency|reset", "[event:string...]"},
    {"memory|usage", "key:key [SAMPLES count:integer]"},
    {"debug", "subcommand=(SLEEP seconds:double|OBJECT key:string|ALLOC-CHECK|ZEROFREE op=(PAUSE|RESUME|DRAIN))"},
    {"acl|cat", "[category:string]"},
    {"acl|deluser", "username:string..."},
    {"acl|dryrun", "username:string command:string [arg:string...]"},
    {"acl|genpass", "[bits:integer]"},
    {"acl|getuser", "username:string"},
    {"acl|log", "[operation=(count:integer|RESET)]"},
    {"acl|setuser", "username:string [rule:string...]"},
    /* pubsub: PSUBSCRIBE's patterns are one argument of type pattern, as in
     * Redis 7.2 (7.0 wraps each in a block of one) */
    {"subscribe", "channel:string..."},
    {"psubscribe", "pattern:pattern..."},
    {"ssubscribe", "shardchannel:string..."},
    {"unsubscribe", "[channel:string...]"},
    {"punsubscribe", "[pattern:pattern...]"},
    {"sunsubscribe", "[shardchannel:string...]"},
    {"publish", "channel:string message:string"},
    {"spublish", "shardchannel:string message:string"},
    {"pubsub|channels", "[pattern:pattern]"},
    {"pubsub|numsub", "[channel:string...]"},
    {"pubsub|shardchannels", "[pattern:pattern]"},
    {"pubsub|shardnumsub", "[shardchannel:string...]"},
    /* cluster */
    {"cluster|keyslot", "key:string"},
    {"cluster|countkeysinslot", "slot:integer"},
    {"cluster|getkeysinslot", "slot:integer count:integer"},
    {"cluster|addslots", "slot:integer..."},
    {"cluster|addslotsrange", "range=(start-slot:integer end-slot:integer)..."},
    {"cluster|delslots", "slot:integer..."},
    {"cluster|delslotsrange", "range=(start-slot:integer end-slot:integer)..."},
    {"cluster|setslot", "slot:integer subcommand=(IMPORTING node-id:string|MIGRATING node-id:string|"
                        "NODE node-id:string|STABLE)"},
    {"cluster|meet", "ip:string port:integer [cluster-bus-port:integer]"},
    {"cluster|forget", "node-id:string"},
    {"cluster|reset", "reset-type=[HARD|SOFT]"},
    {"cluster|set-config-epoch", "config-epoch:integer"},
    {"cluster|replicate", "node-id:string"},
    {"cluster|replicas", "node-id:string"},
    {"cluster|slaves", "node-id:string"},
    {"cluster|count-failure-reports", "node-id:string"},
    {"cluster|failover", "options=[FORCE|TAKEOVER]"},
    /* migration */
    {"dump", "key:key"},
    {"restore", "key:key ttl:integer serialized-value:string [REPLACE] [ABSTTL] [IDLETIME seconds:integer] "
                "[FREQ frequency:integer]"},
    {"restore-asking", "key:key ttl:integer serialized-value:string [REPLACE] [ABSTTL] [IDLETIME seconds:integer] "
                       "[FREQ frequency:integer]"},
    {"migrate", "host:string port:integer key_or_empty_string=(key:key|empty_string=\"\") destination-db:integer "
                "timeout:integer [COPY] [REPLACE] authentication=[[AUTH password:string]|"
                "[AUTH2 username_password=(username:string password:string)]] [KEYS key:key...]"},
    /* keyspace */
    {"del", "key:key..."},
    {"unlink", "key:key..."},
    {"exists", "key:key..."},
    {"type", "key:key"},
    {"touch", "key:key..."},
    {"rename", "key:key newkey:key"},
    {"renamenx", "key:key newkey:key"},
    {"copy", "source:key destination:key [DB destination-db:integer] [REPLACE]"},
    {"object|encoding", "key:key"},
    {"object|freq", "key:key"},
    {"object|idletime", "key:key"},
    {"object|refcount", "key:key"},
    {"scan", "cursor:integer [MATCH pattern:pattern] [COUNT count:integer] [TYPE type:string]"},
    {"keys", "pattern:pattern"},
    {"expire", "key:key seconds:integer condition=[NX|XX|GT|LT]"},
    {"pexpire", "key:key milliseconds:integer condition=[NX|XX|GT|LT]"},
    {"expireat", "key:key unix-time-seconds:unix-time condition=[NX|XX|GT|LT]"},
    {"pexpireat", "key:key unix-time-milliseconds:unix-time condition=[NX|XX|GT|LT]"},
    {"expiretime", "key:key"},
    {"pexpiretime", "key:key"},
    {"ttl", "key:key"},
    {"pttl", "key:key"},
    {"persist", "key:key"},
    /* segments */
    {"mount", "name:string size:string [ENDPOINT uri:string]... [BASE address:string] [RKEY rkey:string] "
              "[TIER tier=(MEMORY|DISK|VRAM)] [HOST host:string] [TOKEN token:string] [OWNER owner:string]"},
    {"unmount", "segment:string [GRACEFUL milliseconds:integer]"},
    {"segment.info", "segment:string"},
    {"segment.token", "segment:string"},
    {"heartbeat", "owner:string"},
    /* objects */
    {"put.start", "key:key size:integer [REPLICAS count:integer] [PREFER segment:string]... [HINT segment:string]... "
                  "[PIN milliseconds:integer] [HARDPIN] [REPLACE]"},
    {"put.end", "key:key [CHECKSUM checksum:string]"},
    {"put.revoke", "key:key"},
    {"get.replicas", "key:key"},
    {"lease", "key:key milliseconds:integer"},
    {"lease.release", "key:key..."},
    {"pin", "key:key duration=[milliseconds:integer|HARD]"},
    {"unpin", "key:key"},
    {"remove", "key:key..."},
    {"object.info", "key:key"},
    {"batch.put.start", "numkeys:integer key_size=(key:key size:integer)... [REPLICAS count:integer] "
                        "[PREFER segment:string]... [HINT segment:string]... [PIN milliseconds:integer] [HARDPIN] "
                        "[REPLACE]"},
    {"batch.put.end", "key:key..."},
    {"batch.get.replicas", "key:key..."},
    {"hold.replicas", "key:key..."},
    {"hold.release", "key:string..."},
    {"batch.exists", "numkeys:integer key:key... [PREFIX] [LEASE]"},
    {"replica.clear", "numkeys:integer key:key... [SEGMENT segment:string]"},
    /* data plane */
    {"seg.write", "segment-id:integer offset:integer payload:string"},
    {"seg.read", "segment-id:integer offset:integer length:integer"},
    {"seg.writev", "segment-id:integer range=(offset:integer payload:string)..."},
    {"seg.readv", "segment-id:integer range=(offset:integer length:integer)..."},
    {"shm.attach", "segment-id:integer"},
    /* strings */
    {"set", "key:key value:string condition=[NX|XX] [GET] expiration=[EX seconds:integer|PX milliseconds:integer|"
            "EXAT unix-time-seconds:unix-time|PXAT unix-time-milliseconds:unix-time|KEEPTTL]"},
    {"get", "key:key"},
    {"getrange", "key:key start:integer end:integer"},
    {"substr", "key:key start:integer end:integer"},
    {"strlen", "key:key"},
    {"mget", "key:key..."},
    {"mset", "key_value=(key:key value:string)..."},
    {"setnx", "key:key value:string"},
    {"setex", "key:key seconds:integer value:string"},
    {"psetex", "key:key milliseconds:integer value:string"},
    {"getset", "key:key value:string"},
    {"getex", "key:key expiration=[EX seconds:integer|PX milliseconds:integer|EXAT unix-time-seconds:unix-time|"
              "PXAT unix-time-milliseconds:unix-time|PERSIST]"},
    {"getdel", "key:key"},
    {"msetnx", "key_value=(key:key value:string)..."},
    {"append", "key:key value:string"},
    {"setrange", "key:key offset:integer value:string"},
    {"incr", "key:key"},
    {"incrby", "key:key increment:integer"},
    {"decr", "key:key"},
    {"decrby", "key:key decrement:integer"},
    {"incrbyfloat", "key:key increment:double"},
    {"lcs", "key1:key key2:key [LEN] [IDX] [MINMATCHLEN len:integer] [WITHMATCHLEN]"},
    /* bitmaps */
    {"setbit", "key:key offset:integer value:integer"},
    {"getbit", "key:key offset:integer"},
    {"bitcount", "key:key index=[start:integer end:integer index_unit=[BYTE|BIT]]"},
    {"bitpos", "key:key bit:integer index=[start:integer end_index=[end:integer index_unit=[BYTE|BIT]]]"},
    {NULL, NULL}};

#define ARG_OPTIONAL (1 << 0)
#define ARG_MULTIPLE (1 << 1)
#define ARG_MULTIPLE_TOKEN (1 << 2) /* the token repeats with each value */

/* One argument of COMMAND DOCS: a leaf (type key, string, ...), a literal
 * (pure-token), or a container (block: all of args in order; oneof: one
 * of them). Built once at start-up and never freed. */
typedef struct cmdArg {
    sds name;
    const char *type;
    sds token; /* NULL: none */
    int flags;
    struct cmdArg *args;
    int nargs;
} cmdArg;

typedef struct synParser {
    const char *cmd;   /* for the message */
    const char *start; /* the synopsis */
    const char *p;
} synParser;

/* A broken synopsis is a bug in this file, found by every server start (so
 * by every test run): say where, and stop. */
static void synFail(synParser *ps, const char *why) __attribute__((noreturn));
static void synFail(synParser *ps, const char *why) {
    fprintf(stderr, "commands.c: synopsis of '%s': %s at offset %d: \"%s\"\n", ps->cmd, why,
            (int)(ps->p - ps->start), ps->start);
    abort();
}

static void synSpaces(synParser *ps) {
    while (*ps->p == ' ') ps->p++;
}

static int synAtEllipsis(const char *p) { return p[0] == '.' && p[1] == '.' && p[2] == '.'; }

/* A word ends at a space, a bracket, '|', '=' or "...". */
static sds synWord(synParser *ps) {
    const char *b = ps->p;
    while (*ps->p && !strchr(" []()|=", *ps->p) && !synAtEllipsis(ps->p)) ps->p++;
    return sdsnewlen(b, (size_t)(ps->p - b));
}

static cmdArg *synNew(void) { return zcalloc(sizeof(cmdArg)); }

/* What one argument owns, its children's included (not the struct). */
static void synFreeFields(cmdArg *a) {
    for (int i = 0; i < a->nargs; i++) synFreeFields(&a->args[i]);
    zfree(a->args);
    sdsfree(a->name);
    sdsfree(a->token);
}

static void synAppend(cmdArg *parent, cmdArg *child) {
    parent->args = zrealloc(parent->args, sizeof(cmdArg) * (size_t)(parent->nargs + 1));
    parent->args[parent->nargs++] = *child;
    zfree(child);
}

/* "a_b_c" from the children's names, for a group nobody labelled (Redis
 * names its groups so: nosave_save). */
static sds synGroupName(cmdArg *g) {
    sds n = sdsempty();
    for (int i = 0; i < g->nargs; i++) n = sdscatprintf(n, "%s%s", i ? "_" : "", g->args[i].name);
    return n;
}

static cmdArg *synGroup(synParser *ps, char close, int *from_paren);

/* One item: [label=] ( [..] | (..) | word ) [...]. */
static cmdArg *synItem(synParser *ps, int *from_paren) {
    synSpaces(ps);
    *from_paren = 0;
    sds label = NULL;
    const char *save = ps->p;
    sds w = synWord(ps);
    if (*ps->p == '=' && sdslen(w)) {
        label = w;
        ps->p++;
    } else {
        sdsfree(w);
        ps->p = save;
    }
    cmdArg *a;
    if (*ps->p == '[' || *ps->p == '(') {
        char open = *ps->p++;
        a = synGroup(ps, open == '[' ? ']' : ')', from_paren);
        if (open == '[') a->flags |= ARG_OPTIONAL;
    } else {
        w = synWord(ps);
        if (sdslen(w) == 0) synFail(ps, "expected an argument");
        a = synNew();
        char *colon = strrchr(w, ':');
        if (colon) {
            static const char *const leafTypes[] = {"key", "string", "integer", "double", "pattern", "unix-time", NULL};
            for (int i = 0; leafTypes[i]; i++)
                if (!strcmp(colon + 1, leafTypes[i])) a->type = leafTypes[i];
            if (a->type == NULL) synFail(ps, "unknown argument type");
            a->name = sdsnewlen(w, (size_t)(colon - w));
        } else {
            a->type = "pure-token";
            a->token = strcmp(w, "\"\"") ? sdsdup(w) : sdsempty();
            a->name = sdsdup(a->token);
            sdstolower(a->name);
        }
        sdsfree(w);
    }
    if (label) {
        sdsfree(a->name);
        a->name = label;
    }
    if (synAtEllipsis(ps->p)) {
        ps->p += 3;
        a->flags |= ARG_MULTIPLE | (a->token ? ARG_MULTIPLE_TOKEN : 0);
    }
    return a;
}

/* Items up to '|', the closing bracket or the end, as a block; a token
 * followed by an argument or a ( ) group becomes that one's token. */
static cmdArg *synSeq(synParser *ps, char close) {
    cmdArg *seq = synNew();
    seq->type = "block";
    for (;;) {
        synSpaces(ps);
        if (*ps->p == '\0' || *ps->p == '|' || *ps->p == close) break;
        int paren;
        cmdArg *a = synItem(ps, &paren);
        synSpaces(ps);
        int literal = !strcmp(a->type, "pure-token") && !(a->flags & ARG_MULTIPLE);
        if (literal && *ps->p && *ps->p != '|' && *ps->p != close && *ps->p != '[') {
            const char *save = ps->p;
            int next_paren;
            cmdArg *next = synItem(ps, &next_paren);
            int leaf = strcmp(next->type, "pure-token") && strcmp(next->type, "block") && strcmp(next->type, "oneof");
            if (!next->token && (leaf || next_paren)) {
                next->token = a->token;
                a->token = NULL;
                if (next->flags & ARG_MULTIPLE && next_paren) next->flags |= ARG_MULTIPLE_TOKEN;
                sdsfree(a->name);
                zfree(a);
                a = next;
            } else {
                /* Not this token's value: a word of its own, parsed again. */
                synFreeFields(next);
                zfree(next);
                ps->p = save;
            }
        }
        synAppend(seq, a);
    }
    return seq;
}

/* The inside of [ ] or ( ), up to close: one item as itself (but a single
 * word in ( ) is a oneof of one, as Redis shapes TYPE NORMAL), several as a
 * block, alternatives as a oneof. */
static cmdArg *synGroup(synParser *ps, char close, int *from_paren) {
    cmdArg *alts = synNew();
    alts->type = "oneof";
    for (;;) {
        cmdArg *seq = synSeq(ps, close);
        if (seq->nargs == 0) synFail(ps, "empty group or alternative");
        if (seq->nargs == 1) {
            cmdArg *only = synNew();
            *only = seq->args[0];
            zfree(seq->args);
            zfree(seq);
            seq = only;
        } else {
            seq->name = synGroupName(seq);
        }
        synAppend(alts, seq);
        if (*ps->p != '|') break;
        ps->p++;
    }
    if (close && *ps->p != close) synFail(ps, close == ']' ? "expected ']'" : "expected ')'");
    if (close) ps->p++;
    *from_paren = close == ')';
    if (alts->nargs == 1 && (close != ')' || !strcmp(alts->args[0].type, "block"))) {
        cmdArg *only = synNew();
        *only = alts->args[0];
        zfree(alts->args);
        zfree(alts);
        return only;
    }
    alts->name = synGroupName(alts);
    return alts;
}

/* Fewest and most words an argument takes (most: -1 for unbounded). */
static void synWords(const cmdArg *a, int *min, int *max) {
    int t = a->token ? 1 : 0, lo = 0, hi = 0;
    if (!strcmp(a->type, "pure-token")) {
        lo = hi = t;
    } else if (!strcmp(a->type, "block")) {
        lo = hi = t;
        for (int i = 0; i < a->nargs; i++) {
            int l, h;
            synWords(&a->args[i], &l, &h);
            lo += l;
            hi = hi < 0 || h < 0 ? -1 : hi + h;
        }
    } else if (!strcmp(a->type, "oneof")) {
        lo = -1;
        for (int i = 0; i < a->nargs; i++) {
            int l, h;
            synWords(&a->args[i], &l, &h);
            if (lo < 0 || l < lo) lo = l;
            if (hi >= 0 && (h < 0 || h > hi)) hi = h;
        }
        lo += t;
        if (hi >= 0) hi += t;
    } else {
        lo = hi = t + 1;
    }
    if (a->flags & ARG_MULTIPLE) hi = -1;
    if (a->flags & ARG_OPTIONAL) lo = 0;
    *min = lo;
    *max = hi;
}

/* Keys must point at a key spec the command has (COMMAND INFO lists one
 * when firstkey is set or the keys are counted). */
static void synCheckKeys(synParser *ps, const serverCommand *cmd, const cmdArg *a) {
    int has_spec = cmd->firstkey != 0 || (cmd->flags & CMD_MOVABLEKEYS);
    if (!strcmp(a->type, "key") && !has_spec) synFail(ps, "a key argument, but the command has no key spec");
    for (int i = 0; i < a->nargs; i++) synCheckKeys(ps, cmd, &a->args[i]);
}

static void parseSynopsis(serverCommand *cmd, const char *synopsis) {
    synParser ps = {cmd->fullname, synopsis, synopsis};
    cmdArg *top = synSeq(&ps, '\0');
    if (*ps.p) synFail(&ps, "unexpected character");
    synCheckKeys(&ps, cmd, top);
    int min, max, depth = cmd->parent ? 2 : 1;
    synWords(top, &min, &max);
    int want = (cmd->arity < 0 ? -cmd->arity : cmd->arity) - depth;
    if (min != want) synFail(&ps, "the words it requires disagree with the arity");
    if (cmd->arity > 0 && max != want) synFail(&ps, "optional words, but the arity is fixed");
    cmd->args = top->args;
    cmd->nargs = top->nargs;
    zfree(top);
}

static void synopsisFor(serverCommand *cmd, int *used) {
    for (int i = 0; commandSynopses[i].command; i++)
        if (!strcmp(commandSynopses[i].command, cmd->fullname)) {
            parseSynopsis(cmd, commandSynopses[i].synopsis);
            used[i] = 1;
            return;
        }
    /* None: right only for a command that takes no arguments, or a
     * container, whose docs are its subcommands'. */
    int depth = cmd->parent ? 2 : 1;
    if (cmd->arity != depth && !cmd->subcommands) {
        synParser ps = {cmd->fullname, "", ""};
        synFail(&ps, "missing: the command takes arguments (add it to commandSynopses)");
    }
}

static void keyPermsFor(serverCommand *cmd); /* below, beside the key flags it reads */

void populateCommandDocs(void) {
    int n = 0;
    while (commandSynopses[n].command) n++;
    int *used = zcalloc(sizeof(int) * (size_t)(n + 1));
    for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
        synopsisFor(cmd, used);
        keyPermsFor(cmd);
        for (serverCommand *sub = cmd->subcommands; sub && sub->name; sub++) {
            synopsisFor(sub, used);
            keyPermsFor(sub);
        }
    }
    for (int i = 0; i < n; i++)
        if (!used[i]) {
            synParser ps = {commandSynopses[i].command, "", ""};
            synFail(&ps, "no such command in commandTable");
        }
    zfree(used);
}

/* ---- COMMAND: the table rendered for clients ----------------------------- */

static const struct {
    int flag;
    const char *name;
} flagNames[] = {{CMD_WRITE, "write"},   {CMD_READONLY, "readonly"}, {CMD_DENYOOM, "denyoom"},
                 {CMD_ADMIN, "admin"},   {CMD_PUBSUB, "pubsub"},     {CMD_NOSCRIPT, "noscript"},
                 {CMD_NOAUTH, "no_auth"},    {CMD_LOADING, "loading"},
                 {CMD_STALE, "stale"},   {CMD_SKIP_MONITOR, "skip_monitor"}, {CMD_SKIP_SLOWLOG, "skip_slowlog"},
                 {CMD_FAST, "fast"},     {CMD_NO_MULTI, "no_multi"}, {CMD_MOVABLEKEYS, "movablekeys"},
                 {0, NULL}};

/* Key flags as Redis 7's key specs name them (RW/RO/OW/RM and access,
 * update, insert, delete), for COMMAND GETKEYSANDFLAGS and the key specs
 * of COMMAND INFO. Most follow from
 * the command's flags; the rest are listed, with a second entry where
 * later keys differ (RENAME's destination). */
static const struct {
    const char *cmd;
    const char *first, *rest;
} keyFlagsTable[] = {
    {"del", "RM delete", NULL},           {"unlink", "RM delete", NULL},
    {"getdel", "RW access delete", NULL}, {"remove", "RM delete", NULL},
    {"replica.clear", "RM delete", NULL},
    {"set", "OW update", NULL},           {"mset", "OW update", NULL},
    {"msetnx", "OW insert", NULL},        {"setnx", "OW insert", NULL},
    {"setex", "OW update", NULL},         {"psetex", "OW update", NULL},
    {"restore", "OW update", NULL},       {"restore-asking", "OW update", NULL},
    {"append", "RW insert", NULL},        {"setrange", "RW update", NULL},
    {"expire", "RW update", NULL},        {"pexpire", "RW update", NULL},
    {"expireat", "RW update", NULL},      {"pexpireat", "RW update", NULL},
    {"persist", "RW update", NULL},       {"rename", "RW access delete", "OW update"},
    {"renamenx", "RW access delete", "OW insert"},
    {"copy", "RO access", "OW update"},   {"migrate", "RW access delete", NULL},
    /* The store's writes that do not read the value: a write-only (%W~)
     * producer may put, publish, revoke and pin without being able to read. */
    {"put.start", "OW update", NULL},     {"batch.put.start", "OW update", NULL},
    {"put.end", "RW update", NULL},       {"batch.put.end", "RW update", NULL},
    {"put.revoke", "RW delete", NULL},
    {"pin", "RW update", NULL},           {"unpin", "RW update", NULL},
    /* Reads of the key's metadata, not its value: no "access". */
    {"exists", "RO", NULL},               {"touch", "RO", NULL},
    {"type", "RO", NULL},                 {"strlen", "RO", NULL},
    {"object|encoding", "RO", NULL},      {"object|freq", "RO", NULL},
    {"object|idletime", "RO", NULL},      {"object|refcount", "RO", NULL},
    {"memory|usage", "RO", NULL},
    {NULL, NULL, NULL}};

static int keyFlagsRow(const serverCommand *cmd) {
    for (int i = 0; keyFlagsTable[i].cmd; i++)
        if (!strcmp(keyFlagsTable[i].cmd, cmd->fullname)) return i;
    return -1;
}

static const char *keyFlags(const serverCommand *cmd, int ordinal) {
    int i = keyFlagsRow(cmd);
    if (i >= 0) return ordinal > 0 && keyFlagsTable[i].rest ? keyFlagsTable[i].rest : keyFlagsTable[i].first;
    if (cmd->flags & CMD_PUBSUB) return "not_key";
    if (cmd->flags & CMD_WRITE) return "RW access update";
    if (cmd->flags & CMD_READONLY) return "RO access";
    return "RO";
}

/* The permission a key's flags ask of an ACL user, as Redis 7 reads its
 * key specs: "access" (the value is read or returned) needs read; "insert",
 * "delete" and "update" need write; a key read only for its metadata
 * (EXISTS, TYPE: "RO") needs a pattern that matches it, either kind. So a
 * %W~ user cannot read through a write (GETDEL, GETSET, INCR, COPY or
 * RENAME to a key it may read, MIGRATE). */
static int keyPermOf(const char *flags) {
    int perm = 0;
    char word[32];
    while (*flags) {
        size_t len = strcspn(flags, " ");
        snprintf(word, sizeof(word), "%.*s", (int)len, flags);
        if (!strcmp(word, "access")) perm |= ACL_READ;
        else if (!strcmp(word, "insert") || !strcmp(word, "delete") || !strcmp(word, "update")) perm |= ACL_WRITE;
        flags += len + (flags[len] == ' ');
    }
    return perm;
}

static void keyPermsFor(serverCommand *cmd) {
    cmd->key_perm[0] = keyPermOf(keyFlags(cmd, 0));
    cmd->key_perm[1] = keyPermOf(keyFlags(cmd, 1));
}

/* Key specs in COMMAND INFO (and key_spec_index in COMMAND DOCS): one, or
 * two where later keys have flags of their own (RENAME, RENAMENX, COPY:
 * source, then destination), as Redis 7 describes them. */
static int keySpecCount(const serverCommand *cmd) {
    int keynum = (cmd->flags & CMD_MOVABLEKEYS) != 0 && cmd->proc != migrateCommand;
    if (!keynum && cmd->firstkey == 0) return 0;
    int i = keyFlagsRow(cmd);
    return !keynum && i >= 0 && keyFlagsTable[i].rest && cmd->lastkey != cmd->firstkey ? 2 : 1;
}

/* A spec's flags are those of its keys, but fixed: SET reads its key only
 * with GET, so its spec says both, with variable_flags, as Redis's does
 * (GETKEYSANDFLAGS resolves them for the call at hand). */
static const char *keySpecFlags(const serverCommand *cmd, int spec) {
    if (!strcmp(cmd->fullname, "set")) return "RW access update variable_flags";
    return keyFlags(cmd, spec);
}

static void addReplyKeyFlags(client *c, const char *flags) {
    int n = 1;
    for (const char *p = flags; *p; p++) n += *p == ' ';
    addReplySetLen(c, n);
    while (*flags) {
        const char *sp = strchr(flags, ' ');
        size_t len = sp ? (size_t)(sp - flags) : strlen(flags);
        char word[32];
        snprintf(word, sizeof(word), "%.*s", (int)len, flags);
        addReplyStatus(c, word);
        flags += len + (sp != NULL);
    }
}

/* Key specs, the Redis 7 form of the key positions: each found by index,
 * its keys either a range (first/last/step) or counted by a numkeys
 * argument (CMD_MOVABLEKEYS), with the flags of its keys (keyFlagsTable),
 * the same words COMMAND GETKEYSANDFLAGS gives. */
static void addReplyKeySpec(client *c, const char *flags, long long index, int keynum, long long a, long long b) {
    addReplyMapLen(c, 3);
    addReplyBulkCString(c, "flags");
    addReplyKeyFlags(c, flags);
    addReplyBulkCString(c, "begin_search");
    addReplyMapLen(c, 2);
    addReplyBulkCString(c, "type");
    addReplyBulkCString(c, "index");
    addReplyBulkCString(c, "spec");
    addReplyMapLen(c, 1);
    addReplyBulkCString(c, "index");
    addReplyLongLong(c, index);
    addReplyBulkCString(c, "find_keys");
    addReplyMapLen(c, 2);
    addReplyBulkCString(c, "type");
    addReplyBulkCString(c, keynum ? "keynum" : "range");
    addReplyBulkCString(c, "spec");
    addReplyMapLen(c, 3);
    if (keynum) {
        addReplyBulkCString(c, "keynumidx");
        addReplyLongLong(c, 0);
        addReplyBulkCString(c, "firstkey");
        addReplyLongLong(c, a);
        addReplyBulkCString(c, "keystep");
        addReplyLongLong(c, b);
    } else {
        addReplyBulkCString(c, "lastkey");
        addReplyLongLong(c, a);
        addReplyBulkCString(c, "keystep");
        addReplyLongLong(c, b);
        addReplyBulkCString(c, "limit");
        addReplyLongLong(c, 0);
    }
}

static void addReplyKeySpecs(client *c, serverCommand *cmd) {
    /* MIGRATE's keys are argv[3] or follow KEYS: a range spec plus
     * movablekeys (COMMAND GETKEYS), as Redis describes it. */
    int keynum = (cmd->flags & CMD_MOVABLEKEYS) != 0 && cmd->proc != migrateCommand;
    int nspecs = keySpecCount(cmd);
    addReplyArrayLen(c, nspecs);
    if (nspecs == 0) return;
    if (keynum) {
        addReplyKeySpec(c, keySpecFlags(cmd, 0), cmd->keynum_idx, 1, cmd->keynum_first - cmd->keynum_idx,
                        cmd->keynum_step);
    } else if (nspecs == 1) {
        addReplyKeySpec(c, keySpecFlags(cmd, 0), cmd->firstkey, 0,
                        cmd->lastkey < 0 ? cmd->lastkey : cmd->lastkey - cmd->firstkey, cmd->keystep);
    } else {
        /* The first key alone, then the rest from the next one on. */
        long long next = cmd->firstkey + cmd->keystep;
        addReplyKeySpec(c, keySpecFlags(cmd, 0), cmd->firstkey, 0, 0, 1);
        addReplyKeySpec(c, keySpecFlags(cmd, 1), next, 0, cmd->lastkey < 0 ? cmd->lastkey : cmd->lastkey - next,
                        cmd->keystep);
    }
}

static void addReplyCommandInfo(client *c, serverCommand *cmd) {
    int nflags = 0;
    for (int i = 0; flagNames[i].name; i++)
        if (cmd->flags & flagNames[i].flag) nflags++;
    addReplyArrayLen(c, 10);
    addReplyBulkCString(c, cmd->fullname);
    addReplyLongLong(c, cmd->arity);
    addReplySetLen(c, nflags);
    for (int i = 0; flagNames[i].name; i++)
        if (cmd->flags & flagNames[i].flag) addReplyStatus(c, flagNames[i].name);
    addReplyLongLong(c, cmd->firstkey);
    addReplyLongLong(c, cmd->lastkey);
    addReplyLongLong(c, cmd->keystep);
    addReplySetLen(c, aclCategoryCount(cmd->acl_categories));
    uint64_t flag;
    const char *cat;
    for (int i = 0; (cat = aclCategoryName(i, &flag)) != NULL; i++)
        if (cmd->acl_categories & flag) {
            sds s = sdscatprintf(sdsempty(), "@%s", cat);
            addReplyStatus(c, s);
            sdsfree(s);
        }
    addReplyArrayLen(c, 0); /* tips */
    addReplyKeySpecs(c, cmd);
    long long nsubs = 0;
    for (serverCommand *s = cmd->subcommands; s && s->name; s++) nsubs++;
    addReplyArrayLen(c, nsubs);
    for (serverCommand *s = cmd->subcommands; s && s->name; s++) addReplyCommandInfo(c, s);
}

/* Each argument as Redis 7 sends it (and redis-cli reads it for hints):
 * name, type, key_spec_index, token, flags (a set of status strings),
 * arguments (of a block or oneof), the optional fields only when set. */
static void addReplyCommandArgs(client *c, const cmdArg *args, int nargs, int nspecs, int *keyno) {
    addReplyArrayLen(c, nargs);
    for (int i = 0; i < nargs; i++) {
        const cmdArg *a = &args[i];
        int key = !strcmp(a->type, "key");
        int nflags = !!(a->flags & ARG_OPTIONAL) + !!(a->flags & ARG_MULTIPLE) + !!(a->flags & ARG_MULTIPLE_TOKEN);
        addReplyMapLen(c, 2 + key + (a->token != NULL) + (nflags > 0) + (a->nargs > 0));
        addReplyBulkCString(c, "name");
        addReplyBulkCString(c, a->name);
        addReplyBulkCString(c, "type");
        addReplyBulkCString(c, a->type);
        if (key) {
            /* Key arguments in order: the first spec's, then the second's. */
            addReplyBulkCString(c, "key_spec_index");
            addReplyLongLong(c, *keyno < nspecs - 1 ? *keyno : (nspecs > 0 ? nspecs - 1 : 0));
            (*keyno)++;
        }
        if (a->token) {
            addReplyBulkCString(c, "token");
            addReplyBulk(c, a->token, sdslen(a->token));
        }
        if (nflags) {
            addReplyBulkCString(c, "flags");
            addReplySetLen(c, nflags);
            if (a->flags & ARG_OPTIONAL) addReplyStatus(c, "optional");
            if (a->flags & ARG_MULTIPLE) addReplyStatus(c, "multiple");
            if (a->flags & ARG_MULTIPLE_TOKEN) addReplyStatus(c, "multiple_token");
        }
        if (a->nargs) {
            addReplyBulkCString(c, "arguments");
            addReplyCommandArgs(c, a->args, a->nargs, nspecs, keyno);
        }
    }
}

static void addReplyCommandDocs(client *c, serverCommand *cmd) {
    long long nsubs = 0;
    for (serverCommand *s = cmd->subcommands; s && s->name; s++) nsubs++;
    const char *group = cmd->group ? cmd->group : (cmd->parent ? cmd->parent->group : "server");
    /* No complexity is given for a command whose cost is not per call
     * (MONITOR), as in Redis. */
    addReplyMapLen(c, 3 + (cmd->complexity != NULL) + (cmd->nargs > 0) + (nsubs > 0));
    addReplyBulkCString(c, "summary");
    addReplyBulkCString(c, cmd->summary);
    addReplyBulkCString(c, "since");
    addReplyBulkCString(c, cmd->since);
    addReplyBulkCString(c, "group");
    addReplyBulkCString(c, group);
    if (cmd->complexity) {
        addReplyBulkCString(c, "complexity");
        addReplyBulkCString(c, cmd->complexity);
    }
    if (cmd->nargs) {
        addReplyBulkCString(c, "arguments");
        int keyno = 0;
        addReplyCommandArgs(c, cmd->args, cmd->nargs, keySpecCount(cmd), &keyno);
    }
    if (nsubs) {
        addReplyBulkCString(c, "subcommands");
        addReplyMapLen(c, nsubs);
        for (serverCommand *s = cmd->subcommands; s && s->name; s++) {
            addReplyBulkCString(c, s->fullname);
            addReplyCommandDocs(c, s);
        }
    }
}

static long long commandCount(void) {
    long long n = 0;
    for (serverCommand *cmd = commandTable; cmd->name; cmd++) n++;
    return n;
}

/* COMMAND GETKEYS: key positions of the command given as arguments, as
 * cluster routing finds them (cluster.c), so a client that asks routes
 * exactly as the server will. */
/* COMMAND GETKEYS / GETKEYSANDFLAGS cmd args...: the keys, each with its
 * flags when asked. */
static void commandGetKeys(client *c, int withflags) {
    sds *argv = c->argv + 2;
    int argc = c->argc - 2;
    serverCommand *cmd = lookupCommand(argv, argc);
    if (!cmd) {
        addReplyError(c, "ERR Invalid command specified");
        return;
    }
    /* Before the arity, as Redis: ECHO a b has no keys, whatever its count. */
    if (keySpecCount(cmd) == 0) {
        addReplyError(c, "ERR The command has no key arguments");
        return;
    }
    if ((cmd->arity > 0 && cmd->arity != argc) || argc < -cmd->arity) {
        addReplyError(c, "ERR Invalid number of arguments specified for command");
        return;
    }
    if (cmd->flags & CMD_MOVABLEKEYS && cmd->proc != migrateCommand) {
        long long n;
        /* n is bounded by the arguments present before any arithmetic. */
        if (cmd->keynum_idx >= argc || !string2ll(argv[cmd->keynum_idx], sdslen(argv[cmd->keynum_idx]), &n) ||
            n < 0 || n > argc || (n > 0 && cmd->keynum_first + (n - 1) * cmd->keynum_step >= argc)) {
            addReplyError(c, "ERR Invalid arguments specified for command");
            return;
        }
    }
    int *keys = zmalloc(sizeof(int) * (size_t)argc);
    int n = clusterCommandKeys(cmd, argv, argc, keys, argc);
    if (n == 0) {
        zfree(keys);
        addReplyError(c, "ERR The command has no key arguments");
        return;
    }
    /* SET's flags vary (keySpecFlags): with GET it reads the old value. */
    int setget = 0;
    if (cmd->proc == setCommand)
        for (int j = 3; j < argc; j++) setget |= !strcasecmp(argv[j], "get");
    addReplyArrayLen(c, n);
    for (int j = 0; j < n; j++) {
        if (withflags) addReplyArrayLen(c, 2);
        addReplyBulk(c, argv[keys[j]], sdslen(argv[keys[j]]));
        if (withflags) addReplyKeyFlags(c, setget ? "RW access update" : keyFlags(cmd, j));
    }
    zfree(keys);
}

/* COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]:
 * every command and subcommand by full name ("config|get"), as Redis 7.
 * No module is loaded yet, so FILTERBY MODULE lists nothing. */
typedef struct commandFilter {
    const char *pattern; /* FILTERBY PATTERN, else NULL */
    int byaclcat;        /* FILTERBY ACLCAT: categories must meet aclcat (an unknown one: 0, nothing) */
    uint64_t aclcat;
    int module;          /* FILTERBY MODULE: no module is loaded, nothing matches */
} commandFilter;

static int commandListMatches(serverCommand *cmd, const commandFilter *f) {
    if (f->module) return 0;
    if (f->byaclcat && !(cmd->acl_categories & f->aclcat)) return 0;
    return !f->pattern || stringmatchlen(f->pattern, strlen(f->pattern), cmd->fullname, sdslen(cmd->fullname), 1);
}

static void commandListCommand(client *c) {
    commandFilter f = {0};
    int by = c->argc == 5 && !strcasecmp(c->argv[2], "filterby");
    if (by && !strcasecmp(c->argv[3], "pattern")) {
        f.pattern = c->argv[4];
    } else if (by && !strcasecmp(c->argv[3], "aclcat")) {
        f.byaclcat = 1;
        f.aclcat = aclCategoryFlag(c->argv[4]);
    } else if (by && !strcasecmp(c->argv[3], "module")) {
        f.module = 1;
    } else if (c->argc != 2) {
        addReplyErrorSyntax(c);
        return;
    }
    long long n = 0;
    for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
        n += commandListMatches(cmd, &f);
        for (serverCommand *sub = cmd->subcommands; sub && sub->name; sub++) n += commandListMatches(sub, &f);
    }
    addReplyArrayLen(c, n);
    for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
        if (commandListMatches(cmd, &f)) addReplyBulkCString(c, cmd->fullname);
        for (serverCommand *sub = cmd->subcommands; sub && sub->name; sub++)
            if (commandListMatches(sub, &f)) addReplyBulkCString(c, sub->fullname);
    }
}

void commandCommand(client *c) {
    if (c->argc == 1) {
        addReplyArrayLen(c, commandCount());
        for (serverCommand *cmd = commandTable; cmd->name; cmd++) addReplyCommandInfo(c, cmd);
        return;
    }
    const char *sub = c->argv[1];
    if (!strcasecmp(sub, "help") && c->argc == 2) {
        static const char *help[] = {
            "(no subcommand)", "    Return details about all commands.",
            "COUNT", "    Return the total number of commands in this server.",
            "LIST [FILTERBY (PATTERN <pattern>|ACLCAT <category>)]", "    Return a list of all commands in this server.",
            "INFO [<command-name> ...]", "    Return details about the named commands, or all of them.",
            "DOCS [<command-name> ...]", "    Return documentation details about the named commands, or all of them.",
            "GETKEYS <full-command>", "    Return the keys from a full command.",
            "GETKEYSANDFLAGS <full-command>", "    Return the keys and the access flags from a full command.",
            NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "count") && c->argc == 2) {
        addReplyLongLong(c, commandCount());
    } else if (!strcasecmp(sub, "info")) {
        if (c->argc == 2) {
            addReplyArrayLen(c, commandCount());
            for (serverCommand *cmd = commandTable; cmd->name; cmd++) addReplyCommandInfo(c, cmd);
            return;
        }
        addReplyArrayLen(c, c->argc - 2);
        for (int j = 2; j < c->argc; j++) {
            serverCommand *cmd = lookupCommandByName(c->argv[j]);
            /* An unknown name is a null bulk under RESP2 ($-1), as Redis
             * answers it; *-1 reads the same in most clients but not in
             * those that check the type. */
            if (cmd) addReplyCommandInfo(c, cmd);
            else addReplyNull(c);
        }
    } else if (!strcasecmp(sub, "docs")) {
        if (c->argc == 2) {
            addReplyMapLen(c, commandCount());
            for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
                addReplyBulkCString(c, cmd->fullname);
                addReplyCommandDocs(c, cmd);
            }
            return;
        }
        long long found = 0;
        for (int j = 2; j < c->argc; j++)
            if (lookupCommandByName(c->argv[j])) found++;
        addReplyMapLen(c, found);
        for (int j = 2; j < c->argc; j++) {
            serverCommand *cmd = lookupCommandByName(c->argv[j]);
            if (!cmd) continue;
            addReplyBulkCString(c, cmd->fullname);
            addReplyCommandDocs(c, cmd);
        }
    } else if (!strcasecmp(sub, "list")) {
        commandListCommand(c);
    } else if (!strcasecmp(sub, "getkeys") && c->argc >= 4) {
        commandGetKeys(c, 0);
    } else if (!strcasecmp(sub, "getkeysandflags") && c->argc >= 4) {
        commandGetKeys(c, 1);
    } else {
        addReplySubcommandSyntaxError(c);
    }
}
