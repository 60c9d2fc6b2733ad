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
 */
#include <string.h>
#include <strings.h>

#include "server.h"
#include "util.h"
#include "zmalloc.h"
#include "cluster.h"

#define W CMD_WRITE
#define R CMD_READONLY
#define M CMD_DENYOOM
#define A CMD_ADMIN
#define N CMD_NOAUTH
#define F CMD_FAST
#define L CMD_LOADING
#define S CMD_STALE

/* name, proc, arity, flags, first, last, step, group, summary, since, complexity, bigarg, subs */
#define SUB(name, proc, arity, flags, summary) \
    {name, proc, arity, flags, 0, 0, 0, NULL, summary, "1.0.0", "O(1)", NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 0}
#define END {NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 0}

static mcCommand configSubcommands[] = {
    SUB("get", configCommand, -3, A | L | S, "Returns the effective values of configuration parameters."),
    SUB("set", configCommand, -4, A | L | S, "Sets configuration parameters in-flight."),
    SUB("resetstat", configCommand, 2, A | L | S, "Resets the server's statistics."),
    SUB("rewrite", configCommand, 2, A | L | S, "Persists the effective configuration to file."),
    SUB("help", configCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static mcCommand clientSubcommands[] = {
    SUB("id", clientCommand, 2, L | S, "Returns the unique client ID of the connection."),
    SUB("setname", clientCommand, 3, L | S, "Sets the connection name."),
    SUB("getname", clientCommand, 2, L | S, "Returns the name of the connection."),
    SUB("list", clientCommand, -2, A | L | S, "Lists open connections."),
    SUB("info", clientCommand, 2, L | S, "Returns information about the connection."),
    SUB("kill", clientCommand, -3, A | L | S, "Terminates open connections."),
    SUB("setinfo", clientCommand, 4, L | S, "Sets information specific to the client or connection."),
    SUB("help", clientCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static mcCommand commandSubcommands[] = {
    SUB("count", commandCommand, 2, L | S, "Returns a count of commands."),
    SUB("info", commandCommand, -2, L | S, "Returns information about one, multiple or all commands."),
    SUB("docs", commandCommand, -2, L | S, "Returns documentary information about one, multiple or all commands."),
    SUB("list", commandCommand, -2, L | S, "Returns a list of command names."),
    SUB("getkeys", commandCommand, -3, L | S, "Extracts the key names from an arbitrary command."),
    SUB("help", commandCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static mcCommand slowlogSubcommands[] = {
    SUB("get", slowlogCommand, -2, A | L | S, "Returns the slow log's entries."),
    SUB("len", slowlogCommand, 2, A | L | S, "Returns the number of entries in the slow log."),
    SUB("reset", slowlogCommand, 2, A | L | S, "Clears all entries from the slow log."),
    SUB("help", slowlogCommand, 2, L | S, "Show helpful text about the different subcommands."),
    END};

static mcCommand memorySubcommands[] = {
    {"usage", memoryCommand, -3, R, 2, 2, 1, NULL, "Estimates the memory usage of a key.", "4.0.0",
     "O(N) where N is the number of samples.", NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 0},
    SUB("help", memoryCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

static mcCommand clusterSubcommands[] = {
    SUB("info", clusterCommand, 2, S, "Returns information about the state of a node."),
    SUB("myid", clusterCommand, 2, S, "Returns the ID of a node."),
    SUB("myshardid", clusterCommand, 2, S, "Returns the shard ID of a node."),
    SUB("nodes", clusterCommand, 2, S, "Returns the cluster configuration for a node."),
    SUB("slots", clusterCommand, 2, S, "Returns the mapping of cluster slots to nodes."),
    SUB("shards", clusterCommand, 2, S, "Returns the mapping of cluster slots to shards."),
    SUB("keyslot", clusterCommand, 3, S, "Returns the hash slot for a key."),
    SUB("countkeysinslot", clusterCommand, 3, S, "Returns the number of keys in a hash slot."),
    SUB("getkeysinslot", clusterCommand, 4, S, "Returns the key names in a hash slot."),
    SUB("addslots", clusterCommand, -3, A | S, "Assigns new hash slots to a node."),
    SUB("addslotsrange", clusterCommand, -4, A | S, "Assigns new hash slot ranges to a node."),
    SUB("delslots", clusterCommand, -3, A | S, "Sets hash slots as unbound for a node."),
    SUB("delslotsrange", clusterCommand, -4, A | S, "Sets hash slot ranges as unbound for a node."),
    SUB("setslot", clusterCommand, -4, A | S, "Binds a hash slot to a node."),
    SUB("meet", clusterCommand, -4, A | S, "Forces a node to handshake with another node."),
    SUB("forget", clusterCommand, 3, A | S, "Removes a node from the nodes table."),
    SUB("reset", clusterCommand, -2, A | S, "Resets a node."),
    SUB("set-config-epoch", clusterCommand, 3, A | S, "Sets the configuration epoch for a new node."),
    SUB("bumpepoch", clusterCommand, 2, A | S, "Advances the cluster config epoch."),
    SUB("saveconfig", clusterCommand, 2, A | S, "Forces a node to save the cluster configuration to disk."),
    SUB("replicate", clusterCommand, 3, A | S, "Configure a node as replica of a primary node."),
    SUB("replicas", clusterCommand, 3, A | S, "Lists the replica nodes of a primary node."),
    SUB("slaves", clusterCommand, 3, A | S, "Lists the replica nodes of a primary node."),
    SUB("count-failure-reports", clusterCommand, 3, A | S, "Returns the number of active failure reports active for a node."),
    SUB("failover", clusterCommand, -2, A | S, "Forces a replica to perform a manual failover of its primary."),
    SUB("links", clusterCommand, 2, S, "Returns a list of all TCP links to and from peer nodes."),
    SUB("help", clusterCommand, 2, L | S, "Returns helpful text about the different subcommands."),
    END};

#define CMD(name, proc, arity, flags, first, last, step, group, summary, since, cx) \
    {name, proc, arity, flags, first, last, step, group, summary, since, cx, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 0}
#define CMDX(name, proc, arity, flags, first, last, step, group, summary, since, cx, bigarg, subs) \
    {name, proc, arity, flags, first, last, step, group, summary, since, cx, bigarg, subs, NULL, NULL, 0, 0, 0, 0, 0, 0, 0}

mcCommand commandTable[] = {
    /* connection */
    CMD("ping", pingCommand, -1, F | S | L, 0, 0, 0, "connection", "Returns the server's liveliness response.", "1.0.0", "O(1)"),
    CMD("echo", echoCommand, 2, F | S | L, 0, 0, 0, "connection", "Returns the given string.", "1.0.0", "O(1)"),
    CMD("hello", helloCommand, -1, N | F | S | L, 0, 0, 0, "connection", "Handshakes with the server.", "6.0.0", "O(1)"),
    CMD("auth", authCommand, -2, N | F | S | L, 0, 0, 0, "connection", "Authenticates the connection.", "1.0.0", "O(N) where N is the number of passwords defined for the user"),
    CMD("select", selectCommand, 2, F | S | L, 0, 0, 0, "connection", "Changes the selected database (only 0 exists).", "1.0.0", "O(1)"),
    CMD("quit", quitCommand, -1, N | F | S | L, 0, 0, 0, "connection", "Closes the connection.", "1.0.0", "O(1)"),
    CMD("reset", resetCommand, 1, N | F | S | L, 0, 0, 0, "connection", "Resets the connection.", "6.2.0", "O(1)"),
    CMDX("client", clientCommand, -2, S | L, 0, 0, 0, "connection", "A container for client connection commands.", "2.4.0", "Depends on subcommand.", NULL, clientSubcommands),
    /* server */
    CMDX("command", commandCommand, -1, S | L, 0, 0, 0, "server", "Returns detailed information about all commands.", "2.8.13", "O(N) where N is the total number of commands", NULL, commandSubcommands),
    CMD("info", infoCommand, -1, S | L, 0, 0, 0, "server", "Returns information and statistics about the server.", "1.0.0", "O(1)"),
    CMDX("memory", memoryCommand, -2, 0, 0, 0, 0, "server", "A container for memory diagnostics commands.", "4.0.0", "Depends on subcommand.", NULL, memorySubcommands),
    CMDX("config", configCommand, -2, 0, 0, 0, 0, "server", "A container for server configuration commands.", "2.0.0", "Depends on subcommand.", NULL, configSubcommands),
    CMD("time", timeCommand, 1, F | S | L, 0, 0, 0, "server", "Returns the server time.", "2.6.0", "O(1)"),
    CMD("dbsize", dbsizeCommand, 1, R | F, 0, 0, 0, "server", "Returns the number of keys in the database.", "1.0.0", "O(1)"),
    CMD("flushall", flushallCommand, -1, W, 0, 0, 0, "server", "Removes all keys.", "1.0.0", "O(N) where N is the total number of keys"),
    CMD("flushdb", flushallCommand, -1, W, 0, 0, 0, "server", "Removes all keys (there is one database).", "1.0.0", "O(N) where N is the number of keys"),
    CMD("shutdown", shutdownCommand, -1, A | L | S, 0, 0, 0, "server", "Stops the server.", "1.0.0", "O(N) when saving, where N is the total number of keys"),
    CMDX("slowlog", slowlogCommand, -2, A, 0, 0, 0, "server", "A container for slow log commands.", "2.2.12", "Depends on subcommand.", NULL, slowlogSubcommands),
    CMD("debug", debugCommand, -2, A | L | S, 0, 0, 0, "server", "A container for debugging commands.", "1.0.0", "Depends on subcommand."),
    /* cluster (cluster.c) */
    CMDX("cluster", clusterCommand, -2, S | L, 0, 0, 0, "cluster", "A container for Redis Cluster commands.", "3.0.0", "Depends on subcommand.", NULL, clusterSubcommands),
    CMD("asking", askingCommand, 1, F, 0, 0, 0, "cluster", "Signals that a cluster client is following an -ASK redirect.", "3.0.0", "O(1)"),
    CMD("readonly", readonlyCommand, 1, F | L | S, 0, 0, 0, "cluster", "Enables read-only queries for a connection to a Redis Cluster replica node.", "3.0.0", "O(1)"),
    CMD("readwrite", readwriteCommand, 1, F | L | S, 0, 0, 0, "cluster", "Enables read-write queries for a connection to a Redis Cluster replica node.", "3.0.0", "O(1)"),
    /* migration (migrate.c) */
    CMD("dump", dumpCommand, 2, R, 1, 1, 1, "generic", "Returns a serialized representation of the value stored at a key.", "2.6.0", "O(1) to access the key and additional O(N*M) to serialize it"),
    CMD("restore", restoreCommand, -4, W | M, 1, 1, 1, "generic", "Creates a key from the serialized representation of a value.", "2.6.0", "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value"),
    CMD("restore-asking", restoreCommand, -4, W | M | CMD_ASKING, 1, 1, 1, "server", "An internal command for migrating keys in a cluster.", "3.0.0", "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value"),
    {"migrate", migrateCommand, -6, W | CMD_MOVABLEKEYS, 3, 3, 1, "generic", "Atomically transfers keys from one instance to another.", "2.6.0", "O(N) where N is the number of keys", NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 0},
    /* keyspace */
    CMD("del", delCommand, -2, W, 1, -1, 1, "generic", "Deletes one or more keys.", "1.0.0", "O(N) where N is the number of keys that will be removed"),
    CMD("unlink", delCommand, -2, W | F, 1, -1, 1, "generic", "Deletes one or more keys (space is reclaimed when no reader holds it).", "4.0.0", "O(1) for each key removed"),
    CMD("exists", existsCommand, -2, R | F, 1, -1, 1, "generic", "Determines whether one or more keys exist.", "1.0.0", "O(N) where N is the number of keys to check"),
    CMD("type", typeCommand, 2, R | F, 1, 1, 1, "generic", "Determines the type of value stored at a key.", "1.0.0", "O(1)"),
    CMD("scan", scanCommand, -2, R, 0, 0, 0, "generic", "Iterates over the key names in the database.", "2.8.0", "O(1) for every call. O(N) for a complete iteration"),
    CMD("keys", keysCommand, 2, R, 0, 0, 0, "generic", "Returns all key names that match a pattern.", "1.0.0", "O(N) with N being the number of keys in the database"),
    CMD("expire", expireCommand, -3, W | F, 1, 1, 1, "generic", "Sets the expiration time of a key in seconds.", "1.0.0", "O(1)"),
    CMD("pexpire", pexpireCommand, -3, W | F, 1, 1, 1, "generic", "Sets the expiration time of a key in milliseconds.", "2.6.0", "O(1)"),
    CMD("ttl", ttlCommand, 2, R | F, 1, 1, 1, "generic", "Returns the expiration time in seconds of a key.", "1.0.0", "O(1)"),
    CMD("pttl", pttlCommand, 2, R | F, 1, 1, 1, "generic", "Returns the expiration time in milliseconds of a key.", "2.6.0", "O(1)"),
    CMD("persist", persistCommand, 2, W | F, 1, 1, 1, "generic", "Removes the expiration time of a key.", "2.2.0", "O(1)"),
    /* segments (Mooncake store) */
    CMD("mount", mountCommand, -3, W | M, 0, 0, 0, "store", "Mounts a segment of memory a client contributes; returns its id.", "0.1.0", "O(S) where S is the number of segments"),
    CMD("unmount", unmountCommand, -2, W, 0, 0, 0, "store", "Unmounts a segment, at once or after GRACEFUL ms.", "0.1.0", "O(N) where N is the number of replicas on the segment"),
    CMD("segments", segmentsCommand, 1, R, 0, 0, 0, "store", "Describes every mounted segment.", "0.1.0", "O(S)"),
    CMD("segment.info", segmentInfoCommand, 2, R | F, 0, 0, 0, "store", "Describes one segment, by name or id.", "0.1.0", "O(S)"),
    CMD("heartbeat", heartbeatCommand, 2, F, 0, 0, 0, "store", "Keeps an owner's segments mounted.", "0.1.0", "O(1)"),
    /* objects (Mooncake store) */
    CMD("put.start", putStartCommand, -3, W | M, 1, 1, 1, "store", "Reserves replicas for a new object (or version); readers see it after PUT.END.", "0.1.0", "O(S) where S is the number of segments"),
    CMD("put.end", putEndCommand, -2, W | F, 1, 1, 1, "store", "Publishes a pending object, replacing any previous version atomically.", "0.1.0", "O(1)"),
    CMD("put.revoke", putRevokeCommand, 2, W | F, 1, 1, 1, "store", "Abandons a pending put and frees its space.", "0.1.0", "O(1)"),
    CMD("get.replicas", getReplicasCommand, 2, R | F, 1, 1, 1, "store", "Returns an object's replicas under a read lease.", "0.1.0", "O(1)"),
    CMD("lease", leaseCommand, 3, R | F, 1, 1, 1, "store", "Extends the read lease of an object.", "0.1.0", "O(1)"),
    CMD("lease.release", leaseReleaseCommand, -2, R | F, 1, -1, 1, "store", "Ends this connection's read leases on keys it has finished reading.", "0.1.0", "O(N) where N is the number of leases the connection holds"),
    CMD("pin", pinCommand, -2, W | F, 1, 1, 1, "store", "Protects an object from eviction: for ms (soft) or HARD.", "0.1.0", "O(1)"),
    CMD("unpin", unpinCommand, 2, W | F, 1, 1, 1, "store", "Removes soft and hard pins.", "0.1.0", "O(1)"),
    CMD("remove", removeCommand, -2, W, 1, -1, 1, "store", "Removes objects (and pending puts); space is reused when leases end.", "0.1.0", "O(N)"),
    CMD("remove.all", removeAllCommand, 1, W, 0, 0, 0, "store", "Removes every object and pending put.", "0.1.0", "O(N)"),
    CMD("object.info", objectInfoCommand, 2, R | F, 1, 1, 1, "store", "Describes an object: state, replicas, lease, pins.", "0.1.0", "O(1)"),
    {"batch.put.start", batchPutStartCommand, -4, W | M | CMD_MOVABLEKEYS, 0, 0, 0, "store", "PUT.START for many keys; one result per key.", "0.1.0", "O(N)", NULL, NULL, NULL, NULL, 0, 0, 0, 0, 1, 2, 2},
    CMD("batch.put.end", batchPutEndCommand, -2, W, 1, -1, 1, "store", "PUT.END for many keys; one result per key.", "0.1.0", "O(N)"),
    CMD("batch.get.replicas", batchGetReplicasCommand, -2, R, 1, -1, 1, "store", "GET.REPLICAS for many keys; one result per key.", "0.1.0", "O(N)"),
    /* strings, in the server's own pool */
    CMDX("seg.write", segWriteCommand, 4, W | M, 0, 0, 0, "data", "Writes bytes into the extent of a pending object in a segment this server holds.", "0.4.0", "O(N)", segWriteBigArgProc, NULL),
    CMD("seg.read", segReadCommand, 4, R, 0, 0, 0, "data", "Reads bytes from the extent of a complete object in a segment this server holds.", "0.4.0", "O(N)"),
    CMD("seg.writev", segWritevCommand, -4, W | M, 0, 0, 0, "data", "Writes several ranges, each inside the extent of a pending object, in one segment this server holds; all or none.", "0.4.0", "O(N)"),
    CMD("seg.readv", segReadvCommand, -4, R, 0, 0, 0, "data", "Reads several ranges, each inside the extent of a complete object, from one segment this server holds; all or none.", "0.4.0", "O(N)"),
    CMD("shm.attach", shmAttachCommand, 2, R, 0, 0, 0, "data", "Sends the segment's memory file by SCM_RIGHTS (unix socket only).", "0.4.0", "O(1)"),
    CMDX("set", setCommand, -3, W | M, 1, 1, 1, "string", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", "1.0.0", "O(1)", setBigArgProc, NULL),
    CMD("get", getCommand, 2, R | F, 1, 1, 1, "string", "Returns the string value of a key.", "1.0.0", "O(1)"),
    CMD("getrange", getrangeCommand, 4, R, 1, 1, 1, "string", "Returns a substring of the string stored at a key.", "2.4.0", "O(N) where N is the length of the returned string"),
    CMD("strlen", strlenCommand, 2, R | F, 1, 1, 1, "string", "Returns the length of a string value.", "2.2.0", "O(1)"),
    CMD("mget", mgetCommand, -2, R | F, 1, -1, 1, "string", "Atomically returns the string values of one or more keys.", "1.0.0", "O(N) where N is the number of keys to retrieve"),
    CMDX("mset", msetCommand, -3, W | M, 1, -1, 2, "string", "Atomically creates or modifies the string values of one or more keys.", "1.0.1", "O(N) where N is the number of keys to set", msetBigArgProc, NULL),
    END};

#undef W
#undef R
#undef M
#undef A
#undef N
#undef F
#undef L
#undef S

/* ---- COMMAND: the table rendered for clients ----------------------------- */

static const struct {
    int flag;
    const char *name;
} flagNames[] = {{CMD_WRITE, "write"},   {CMD_READONLY, "readonly"}, {CMD_DENYOOM, "denyoom"},
                 {CMD_ADMIN, "admin"},   {CMD_NOAUTH, "no_auth"},    {CMD_LOADING, "loading"},
                 {CMD_STALE, "stale"},   {CMD_FAST, "fast"},         {CMD_MOVABLEKEYS, "movablekeys"},
                 {0, NULL}};

/* Key specs, the Redis 7 form of the key positions: one spec, found by
 * index, whose keys are either a range (first/last/step) or counted by a
 * numkeys argument (CMD_MOVABLEKEYS). */
static void addReplyKeySpecs(client *c, mcCommand *cmd) {
    /* MIGRATE's keys are argv[3] or follow KEYS: a range spec plus
     * movablekeys (COMMAND GETKEYS), as Redis describes it. */
    int keynum = (cmd->flags & CMD_MOVABLEKEYS) != 0 && cmd->proc != migrateCommand;
    if (!keynum && cmd->firstkey == 0) {
        addReplyArrayLen(c, 0);
        return;
    }
    addReplyArrayLen(c, 1);
    addReplyMapLen(c, 3);
    addReplyBulkCString(c, "flags");
    addReplySetLen(c, 1);
    addReplyStatus(c, (cmd->flags & CMD_WRITE) ? "RW" : "RO");
    addReplyBulkCString(c, "begin_search");
    addReplyMapLen(c, 2);
    addReplyBulkCString(c, "type");
    addReplyBulkCString(c, "index");
    addReplyBulkCString(c, "spec");
    addReplyMapLen(c, 1);
    addReplyBulkCString(c, "index");
    addReplyLongLong(c, keynum ? cmd->keynum_idx : cmd->firstkey);
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
        addReplyLongLong(c, cmd->keynum_first - cmd->keynum_idx);
        addReplyBulkCString(c, "keystep");
        addReplyLongLong(c, cmd->keynum_step);
    } else {
        addReplyBulkCString(c, "lastkey");
        addReplyLongLong(c, cmd->lastkey < 0 ? cmd->lastkey : cmd->lastkey - cmd->firstkey);
        addReplyBulkCString(c, "keystep");
        addReplyLongLong(c, cmd->keystep);
        addReplyBulkCString(c, "limit");
        addReplyLongLong(c, 0);
    }
}

static void addReplyCommandInfo(client *c, mcCommand *cmd) {
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
    addReplySetLen(c, 0);   /* ACL categories: there are no ACLs */
    addReplyArrayLen(c, 0); /* tips */
    addReplyKeySpecs(c, cmd);
    long long nsubs = 0;
    for (mcCommand *s = cmd->subcommands; s && s->name; s++) nsubs++;
    addReplyArrayLen(c, nsubs);
    for (mcCommand *s = cmd->subcommands; s && s->name; s++) addReplyCommandInfo(c, s);
}

static void addReplyCommandDocs(client *c, mcCommand *cmd) {
    long long nsubs = 0;
    for (mcCommand *s = cmd->subcommands; s && s->name; s++) nsubs++;
    const char *group = cmd->group ? cmd->group : (cmd->parent ? cmd->parent->group : "server");
    addReplyMapLen(c, nsubs ? 5 : 4);
    addReplyBulkCString(c, "summary");
    addReplyBulkCString(c, cmd->summary);
    addReplyBulkCString(c, "since");
    addReplyBulkCString(c, cmd->since);
    addReplyBulkCString(c, "group");
    addReplyBulkCString(c, group);
    addReplyBulkCString(c, "complexity");
    addReplyBulkCString(c, cmd->complexity);
    if (nsubs) {
        addReplyBulkCString(c, "subcommands");
        addReplyMapLen(c, nsubs);
        for (mcCommand *s = cmd->subcommands; s && s->name; s++) {
            addReplyBulkCString(c, s->fullname);
            addReplyCommandDocs(c, s);
        }
    }
}

static long long commandCount(void) {
    long long n = 0;
    for (mcCommand *cmd = commandTable; cmd->name; cmd++) n++;
    return n;
}

/* COMMAND GETKEYS: key positions of the command given as arguments, as
 * cluster routing finds them (cluster.c), so a client that asks routes
 * exactly as the server will. */
static void commandGetKeys(client *c) {
    sds *argv = c->argv + 2;
    int argc = c->argc - 2;
    mcCommand *cmd = lookupCommand(argv, argc);
    if (!cmd) {
        addReplyError(c, "ERR Invalid command specified");
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
    addReplyArrayLen(c, n);
    for (int j = 0; j < n; j++) addReplyBulk(c, argv[keys[j]], sdslen(argv[keys[j]]));
    zfree(keys);
}

void commandCommand(client *c) {
    if (c->argc == 1) {
        addReplyArrayLen(c, commandCount());
        for (mcCommand *cmd = commandTable; cmd->name; cmd++) addReplyCommandInfo(c, cmd);
        return;
    }
    const char *sub = c->argv[1];
    if (!strcasecmp(sub, "help") && c->argc == 2) {
        static const char *help[] = {
            "(no subcommand)", "    Return details about all commands.",
            "COUNT", "    Return the total number of commands in this server.",
            "LIST [FILTERBY PATTERN <pattern>]", "    Return a list of all commands in this server.",
            "INFO [<command-name> ...]", "    Return details about the named commands, or all of them.",
            "DOCS [<command-name> ...]", "    Return documentation details about the named commands, or all of them.",
            "GETKEYS <full-command>", "    Return the keys from a full command.",
            NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "count") && c->argc == 2) {
        addReplyLongLong(c, commandCount());
    } else if (!strcasecmp(sub, "info")) {
        if (c->argc == 2) {
            addReplyArrayLen(c, commandCount());
            for (mcCommand *cmd = commandTable; cmd->name; cmd++) addReplyCommandInfo(c, cmd);
            return;
        }
        addReplyArrayLen(c, c->argc - 2);
        for (int j = 2; j < c->argc; j++) {
            mcCommand *cmd = lookupCommandByName(c->argv[j]);
            if (!cmd && strchr(c->argv[j], '|')) {
                sds *parts;
                int n;
                parts = sdssplitlen(c->argv[j], sdslen(c->argv[j]), "|", 1, &n);
                if (n == 2) cmd = lookupCommand(parts, 2);
                sdsfreesplitres(parts, n);
            }
            if (cmd) addReplyCommandInfo(c, cmd);
            else addReplyNullArray(c);
        }
    } else if (!strcasecmp(sub, "docs")) {
        if (c->argc == 2) {
            addReplyMapLen(c, commandCount());
            for (mcCommand *cmd = commandTable; cmd->name; cmd++) {
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
            mcCommand *cmd = lookupCommandByName(c->argv[j]);
            if (!cmd) continue;
            addReplyBulkCString(c, cmd->fullname);
            addReplyCommandDocs(c, cmd);
        }
    } else if (!strcasecmp(sub, "list")) {
        const char *pattern = NULL;
        if (c->argc == 5 && !strcasecmp(c->argv[2], "filterby") && !strcasecmp(c->argv[3], "pattern")) {
            pattern = c->argv[4];
        } else if (c->argc != 2) {
            addReplyErrorSyntax(c);
            return;
        }
        long long n = 0;
        for (mcCommand *cmd = commandTable; cmd->name; cmd++)
            if (!pattern || stringmatchlen(pattern, strlen(pattern), cmd->fullname, sdslen(cmd->fullname), 1)) n++;
        addReplyArrayLen(c, n);
        for (mcCommand *cmd = commandTable; cmd->name; cmd++)
            if (!pattern || stringmatchlen(pattern, strlen(pattern), cmd->fullname, sdslen(cmd->fullname), 1))
                addReplyBulkCString(c, cmd->fullname);
    } else if (!strcasecmp(sub, "getkeys") && c->argc >= 3) {
        commandGetKeys(c);
    } else {
        addReplySubcommandSyntaxError(c);
    }
}
