/* cluster.c -- Redis Cluster's contract, with etcd as the source of truth.
 *
 * What clients see is Redis Cluster's, byte for byte where they parse it:
 * 16384 slots hashed with CRC16 and hash tags, -MOVED / -ASK / -TRYAGAIN /
 * -CROSSSLOT / -CLUSTERDOWN, and the CLUSTER command family that
 * `redis-cli --cluster`, redis-py's RedisCluster and redis-benchmark drive.
 *
 * What is different is underneath. Redis nodes agree on the topology by
 * gossip on a bus, resolving conflicts with config epochs. Here every node
 * writes its own record to etcd (cluster_sync.c: nodes/<id>, a JSON object
 * with its address, group, config epoch, owned slot ranges and open
 * migrating/importing slots), every topology change is one etcd
 * transaction that compares the mod revisions of the records it read, and
 * every node watches the prefix and rebuilds its view from the records. So
 * two nodes never disagree for longer than a watch event takes, and a
 * change acknowledged to a client is durable in etcd. Liveness is an etcd
 * lease per node (alive/<id>): when a node dies its lease expires after
 * cluster-node-timeout and every node flags it `fail` at once.
 *
 * A group is what Redis calls a cluster: a fresh node is alone in a group
 * of its own (cluster_known_nodes:1, so redis-cli accepts it as empty), and
 * CLUSTER MEET merges two groups. Several groups, and several clusters
 * (cluster-name), can share one etcd.
 *
 * This file holds the view (records -> slot map, rebuilt whole on each
 * change: 16384 slots and a handful of nodes cost microseconds), the
 * per-slot key index, redirection on the hot path (one CRC16 and an array
 * load per key), and the read-only CLUSTER subcommands. Everything that
 * talks to etcd is in cluster_sync.c; the record's JSON form, which comes
 * off the wire and is fuzzed, in cluster_node.c.
 */
#include "cluster.h"
#include "tenantkeys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "acl.h"
#include "pubsub.h"
#include "replication.h"
#include "segment.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

/* ---- nodes ---------------------------------------------------------------- */

static dictType nodesDictType = {dictCStrHash, dictCStrEqual, NULL, NULL};

clusterNode *clusterLookupNode(const char *id, size_t len) {
    if (!server.cluster || len != CLUSTER_NAMELEN) return NULL;
    char buf[CLUSTER_NAMELEN + 1];
    memcpy(buf, id, len);
    buf[len] = '\0';
    return dictFetchValue(server.cluster->nodes, buf);
}

int clusterNodeInMyGroup(const clusterNode *n) {
    return n == server.cluster->myself || !strcmp(n->group, server.cluster->myself->group);
}

int clusterNodeOwnsSlot(const clusterNode *n, int slot) {
    for (int i = 0; i < n->nranges; i++)
        if (slot >= n->ranges[i][0] && slot <= n->ranges[i][1]) return 1;
    return 0;
}

/* ---- the node id, kept in dir ----------------------------------------------- */

/* The id must survive restarts (the node's slots are keyed by it in etcd),
 * so it lives in a small file in `dir`, written atomically. A file that is
 * there but unreadable stops start-up: a node must never silently take a
 * new identity and orphan its slots. */
static sds configFilePath(void) {
    if (server.cluster_config_file && server.cluster_config_file[0])
        return sdsnew(server.cluster_config_file);
    return sdscatprintf(sdsempty(), "nodes-%d.conf", server.port);
}

static int loadOrCreateNodeId(char *id, char *err, size_t errlen) {
    sds path = configFilePath();
    FILE *fp = fopen(path, "r");
    int rc = C_ERR;
    if (fp) {
        char line[256];
        int ok = 0;
        while (fgets(line, sizeof(line), fp)) {
            if (!strncmp(line, "id ", 3)) {
                char *v = line + 3;
                size_t l = strcspn(v, "\r\n");
                ok = l == CLUSTER_NAMELEN;
                for (size_t i = 0; ok && i < l; i++) ok = strchr("0123456789abcdef", v[i]) != NULL && v[i];
                if (ok) {
                    memcpy(id, v, CLUSTER_NAMELEN);
                    id[CLUSTER_NAMELEN] = '\0';
                }
                break;
            }
        }
        fclose(fp);
        if (!ok) {
            snprintf(err, errlen, "cluster config file '%s' has no valid 'id <40 hex chars>' line; "
                     "fix or remove it (removing gives this node a new identity)", path);
            goto done;
        }
        rc = C_OK;
        goto done;
    }
    if (errno != ENOENT) {
        snprintf(err, errlen, "cannot read cluster config file '%s': %s", path, strerror(errno));
        goto done;
    }
    getRandomHexChars(id, CLUSTER_NAMELEN);
    id[CLUSTER_NAMELEN] = '\0';
    rc = clusterSaveNodeId(id, err, errlen);
done:
    sdsfree(path);
    return rc;
}

int clusterSaveNodeId(const char *id, char *err, size_t errlen) {
    sds path = configFilePath();
    sds body = sdscatprintf(sdsempty(), "# Mooncake cluster node identity. The topology lives in etcd.\nid %s\n", id);
    int rc = C_OK;
    if (writeFileAtomic(path, body, sdslen(body)) == -1) {
        snprintf(err, errlen, "cannot write cluster config file '%s': %s", path, strerror(errno));
        rc = C_ERR;
    }
    sdsfree(body);
    sdsfree(path);
    return rc;
}

/* The address others should use: the announced one, else the first
 * concrete bind address; clients need a concrete IP in every reply. */
static void myAddress(char *ip, size_t iplen, int *port, int *cport) {
    const char *addr = NULL;
    if (server.cluster_announce_ip && server.cluster_announce_ip[0]) {
        addr = server.cluster_announce_ip;
    } else {
        for (int j = 0; j < server.bindaddr_count && !addr; j++) {
            const char *a = server.bindaddr[j];
            if (*a == '-') a++;
            if (strcmp(a, "*") && strcmp(a, "0.0.0.0") && strcmp(a, "::") && strcmp(a, "::*")) addr = a;
        }
    }
    snprintf(ip, iplen, "%s", addr ? addr : "127.0.0.1");
    *port = server.cluster_announce_port ? (int)server.cluster_announce_port : server.port;
    /* There is no bus (etcd is it), but CLUSTER NODES shows one: Redis's
     * port+10000, or the port itself where that would not fit. */
    *cport = server.cluster_announce_bus_port ? (int)server.cluster_announce_bus_port : *port + 10000;
    if (*cport > 65535) *cport = *port;
}

void clusterInit(void) {
    char err[512];
    char id[CLUSTER_NAMELEN + 1];
    if (!server.cluster_enabled) return;
    if (loadOrCreateNodeId(id, err, sizeof(err)) != C_OK) {
        serverLog(LL_WARNING, "Cluster: %s", err);
        exit(1);
    }
    clusterState *cs = zcalloc(sizeof(*cs));
    server.cluster = cs;
    cs->nodes = dictCreate(&nodesDictType);
    cs->myself = clusterNodeCreate(id);
    myAddress(cs->myself->ip, sizeof(cs->myself->ip), &cs->myself->port, &cs->myself->cport);
    cs->myself->flags = CNODE_MYSELF;
    cs->myself->alive = 1;
    dictAdd(cs->nodes, cs->myself->id, cs->myself);
    serverLog(LL_NOTICE, "Cluster: node id %s, announced as %s:%d@%d, cluster '%s'", id, cs->myself->ip,
              cs->myself->port, cs->myself->cport, server.cluster_name);
    uint64_t base;
    getRandomBytes((unsigned char *)&base, sizeof(base));
    segmentSetNextId(((base & 0x7fffffffULL) + 1) << 32);
    clusterRebuild();
    if (clusterSyncInit(err, sizeof(err)) != C_OK) {
        serverLog(LL_WARNING, "Cluster: %s", err);
        exit(1);
    }
}

/* ---- the view --------------------------------------------------------------- */

/* Shard channels of a slot that just left this node are dropped, their
 * subscribers told (pubsub.c). A put still pending in such a slot can never be
 * published here (its PUT.END now gets MOVED, and the writer redoes the put
 * on the new owner), so it is abandoned: its space comes back after
 * put-release-timeout, so a writer still writing never scribbles on a new
 * owner's bytes. Complete keys moved already (MIGRATE) before the slot
 * could be given away. */
static void abandonPutsInLostSlots(void) {
    static unsigned char mine[CLUSTER_SLOTS / 8];
    clusterState *cs = server.cluster;
    int lost = 0;
    unsigned char lostmap[CLUSTER_SLOTS / 8];
    memset(lostmap, 0, sizeof(lostmap));
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        int was = (mine[s >> 3] >> (s & 7)) & 1, is = cs->slots[s] == cs->myself;
        if (was && !is) {
            lostmap[s >> 3] |= (unsigned char)(1 << (s & 7));
            lost = 1;
        }
        if (is) mine[s >> 3] |= (unsigned char)(1 << (s & 7));
        else mine[s >> 3] &= (unsigned char)~(1 << (s & 7));
    }
    if (!lost) return;
    pubsubShardSlotsLost(lostmap);
    if (storePendingSize() == 0) return;
    dictIterator *it = dictGetSafeIterator(server.pending);
    dictEntry *de;
    long long n = 0;
    while ((de = dictNext(it)) != NULL) {
        sds key = dictGetKey(de);
        int s = (int)keyHashSlot(key, sdslen(key));
        if (!(lostmap[s >> 3] & (1 << (s & 7)))) continue;
        storeObj *o = storePendingUnlink(key);
        if (o) storePendingAbandon(o);
        n++;
    }
    dictReleaseIterator(it);
    if (n) serverLog(LL_NOTICE, "Cluster: abandoned %lld pending puts in slots that moved away", n);
}

void clusterRebuild(void) {
    clusterState *cs = server.cluster;
    memset(cs->slots, 0, sizeof(cs->slots));
    memset(cs->migrating_to, 0, sizeof(cs->migrating_to));
    memset(cs->importing_from, 0, sizeof(cs->importing_from));
    cs->current_epoch = 0;
    cs->known = 0;
    cs->my_replicas = 0;
    dictIterator *it = dictGetSafeIterator(cs->nodes);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        clusterNode *n = dictGetVal(de);
        n->numslots = 0;
        n->flags = (n == cs->myself ? CNODE_MYSELF : 0) | (n != cs->myself && !n->alive ? CNODE_FAIL : 0);
        if (!clusterNodeInMyGroup(n)) continue;
        cs->known++;
        if (n->config_epoch > cs->current_epoch) cs->current_epoch = n->config_epoch;
        if (clusterNodeIsReplica(n)) { /* a replica serves its primary's slots, owns none */
            if (!strcmp(n->primary, cs->myself->id)) cs->my_replicas++;
            continue;
        }
        /* Two records claiming one slot (a MEET of two clusters that both
         * assigned it): the higher config epoch wins, then the lower id,
         * so every node resolves it the same way. */
        for (int r = 0; r < n->nranges; r++)
            for (int s = n->ranges[r][0]; s <= n->ranges[r][1]; s++) {
                clusterNode *o = cs->slots[s];
                if (o == NULL || n->config_epoch > o->config_epoch ||
                    (n->config_epoch == o->config_epoch && strcmp(n->id, o->id) < 0))
                    cs->slots[s] = n;
            }
    }
    dictReleaseIterator(it);
    clusterNode *me = cs->myself;
    for (int i = 0; i < me->nmigrating; i++) {
        clusterNode *to = dictFetchValue(cs->nodes, me->migrating[i].node);
        if (to && cs->slots[me->migrating[i].slot] == me) cs->migrating_to[me->migrating[i].slot] = to;
    }
    for (int i = 0; i < me->nimporting; i++) {
        clusterNode *from = dictFetchValue(cs->nodes, me->importing[i].node);
        if (from && cs->slots[me->importing[i].slot] != me) cs->importing_from[me->importing[i].slot] = from;
    }
    cs->slots_assigned = cs->slots_ok = cs->slots_fail = 0;
    cs->size = 0;
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        clusterNode *n = cs->slots[s];
        if (!n) continue;
        if (n->numslots++ == 0) cs->size++;
        cs->slots_assigned++;
        if (n->flags & CNODE_FAIL) cs->slots_fail++;
        else cs->slots_ok++;
    }
    abandonPutsInLostSlots();
    /* Held after a restart without data: what we would answer is not what
     * was acknowledged (cluster_sync.c, restartedWithoutData). */
    int ok = !cs->held_empty && (server.cluster_require_full_coverage ? cs->slots_ok == CLUSTER_SLOTS : 1);
    if (ok != cs->state_ok)
        serverLog(LL_NOTICE, "Cluster state changed: %s", ok ? "ok" : "fail");
    cs->state_ok = ok;
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        cs->slot_local[s] = ok && cs->slots[s] == cs->myself && !cs->migrating_to[s] && !cs->importing_from[s];
    replClusterChanged();
}

clusterNode *clusterMyPrimary(void) {
    clusterState *cs = server.cluster;
    if (!cs || !clusterNodeIsReplica(cs->myself) || !cs->myself->primary[0]) return NULL;
    return dictFetchValue(cs->nodes, cs->myself->primary);
}

/* ---- keys by slot ------------------------------------------------------------ */

/* The keyspace's own key sds is the entry: the index holds pointers, hashed
 * by address, and is told of every insertion and deletion (store.c). */
static uint64_t ptrHash(const void *p) {
    uintptr_t v = (uintptr_t)p;
    return dictGenHashFunction(&v, sizeof(v));
}
static int ptrCompare(const void *a, const void *b) { return a == b; }
static dictType slotKeysType = {ptrHash, ptrCompare, NULL, NULL};

unsigned long clusterSlotKeysPresize;

void clusterSlotKeyAdd(sds key) {
    int slot = (int)keyHashSlot(key, sdslen(key));
    dict **d = &server.cluster->slot_keys[slot];
    if (*d == NULL) {
        *d = dictCreate(&slotKeysType);
        if (clusterSlotKeysPresize) dictExpand(*d, clusterSlotKeysPresize);
    }
    dictAdd(*d, key, NULL);
}

void clusterSlotKeyDel(sds key) {
    int slot = (int)keyHashSlot(key, sdslen(key));
    dict *d = server.cluster->slot_keys[slot];
    if (d) dictDelete(d, key);
}

/* FLUSHALL ASYNC: every slot's index handed to take, to be freed later. */
void clusterSlotKeysDetach(void (*take)(dict *d)) {
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        if (!server.cluster->slot_keys[s]) continue;
        take(server.cluster->slot_keys[s]);
        server.cluster->slot_keys[s] = NULL;
    }
}

void clusterSlotKeysFlush(void) {
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        if (!server.cluster->slot_keys[s]) continue;
        dictRelease(server.cluster->slot_keys[s]);
        server.cluster->slot_keys[s] = NULL;
    }
}

unsigned long clusterCountKeysInSlot(int slot) {
    dict *d = server.cluster->slot_keys[slot];
    return d ? dictSize(d) : 0;
}

/* ---- redirection ----------------------------------------------------------- */

/* Key positions of a command as argv indexes; returns how many (at most
 * max). MIGRATE's keys are either argv[3] or everything after KEYS. */
int clusterCommandKeys(serverCommand *cmd, sds *argv, int argc, int *keys, int max) {
    int n = 0;
    if (cmd->proc == migrateCommand) {
        if (argc > 3 && sdslen(argv[3])) {
            keys[n++] = 3;
            return n;
        }
        for (int j = 6; j < argc; j++)
            if (!strcasecmp(argv[j], "keys")) {
                for (int k = j + 1; k < argc && n < max; k++) keys[n++] = k;
                break;
            }
        return n;
    }
    if (cmd->flags & CMD_MOVABLEKEYS) {
        long long num;
        if (cmd->keynum_idx >= argc ||
            !string2ll(argv[cmd->keynum_idx], sdslen(argv[cmd->keynum_idx]), &num) || num < 0)
            return 0;
        for (long long i = 0; i < num && n < max; i++) {
            long long j = cmd->keynum_first + i * cmd->keynum_step;
            if (j >= argc) break;
            keys[n++] = (int)j;
        }
        return n;
    }
    if (cmd->firstkey == 0) return 0;
    int last = cmd->lastkey < 0 ? argc + cmd->lastkey : cmd->lastkey;
    for (int j = cmd->firstkey; j <= last && j < argc && n < max; j += cmd->keystep) keys[n++] = j;
    return n;
}

/* Whether a key of an open slot counts as here. On the importing side a
 * pending put does: it was started there after an -ASK and ends there. On
 * the migrating side only a complete version does. The migration moves
 * complete keys (GETKEYSINSLOT, MIGRATE) until none is left and then gives
 * the slot away, so a put published here after its last look would stay
 * behind on a node that no longer owns its slot, acknowledged and lost (the
 * target takes the slot without seeing our keys). So everything but the
 * put's withdrawal goes to the target: its PUT.END gets -ASK, the put is
 * dropped here (storeDropAskedPuts) and the writer redoes it there, as it
 * does after -MOVED. */
static int keyIsHere(sds key, serverCommand *cmd, int migrating) {
    if (storeLookupWrite(key) != NULL) return 1;
    if (migrating && cmd->proc != putRevokeCommand) return 0;
    return storePendingLookup(key) != NULL;
}

static int multiHasWrite(client *c) {
    for (int i = 0; i < c->mstate.count; i++)
        if (c->mstate.cmds[i].cmd->flags & CMD_WRITE) return 1;
    return 0;
}

static void addReplyRedirect(client *c, const char *word, int slot, clusterNode *n) {
    addReplyErrorFormat(c, "-%s %d %s:%d", word, slot, n->ip, n->port);
}

/* Redis's getNodeByQuery, with the same order of checks so clients see
 * the same errors in the same situations. For EXEC the keys are those of
 * every queued command: a transaction runs on one node, so they must all
 * be in one slot (each was already routed alone when it was queued).
 * Returns 1 if it replied. */
int clusterRedirect(client *c) {
    clusterState *cs = server.cluster;
    serverCommand *cmd = c->cmd;
    multiCmd one = {cmd, c->argc, c->argv, NULL, NULL};
    multiCmd *cmds = &one;
    int ncmds = 1;
    if (cmd->proc == execCommand) {
        if (!(c->flags & CLIENT_MULTI)) return 0; /* EXEC will just say "without MULTI" */
        cmds = c->mstate.cmds;
        ncmds = c->mstate.count;
    } else if (!(cmd->flags & CMD_MOVABLEKEYS) && cmd->firstkey == 0 && cmd->proc != migrateCommand) {
        return 0;
    }
    int stackkeys[64];
    int *keys = stackkeys, keyscap = 64;
    int replied = 0;
    int slot = -1, missing = 0, existing = 0, nkeys = 0;
    clusterNode *n = NULL;
    int migrating = 0, importing = 0;
    for (int m = 0; m < ncmds; m++) {
        multiCmd *mc = &cmds[m];
        if (mc->argc > keyscap) {
            if (keys != stackkeys) zfree(keys);
            keyscap = mc->argc;
            keys = zmalloc(sizeof(int) * (size_t)keyscap);
        }
        nkeys = clusterCommandKeys(mc->cmd, mc->argv, mc->argc, keys, keyscap);
        /* The common case: one command, every key in one slot that is ours
         * and settled. */
        if (ncmds == 1 && nkeys > 0) {
            int first = (int)keyHashSlot(mc->argv[keys[0]], sdslen(mc->argv[keys[0]]));
            if (cs->slot_local[first]) {
                int i = 1;
                while (i < nkeys && (int)keyHashSlot(mc->argv[keys[i]], sdslen(mc->argv[keys[i]])) == first) i++;
                if (i == nkeys) goto done;
            }
        }
        for (int i = 0; i < nkeys; i++) {
            sds k = mc->argv[keys[i]];
            int s = (int)keyHashSlot(k, sdslen(k));
            if (slot == -1) {
                slot = s;
                n = cs->slots[s];
                if (n == NULL) {
                    addReplyError(c, "-CLUSTERDOWN Hash slot not served");
                    replied = 1;
                    goto done;
                }
                if (n == cs->myself && cs->migrating_to[s]) migrating = 1;
                else if (cs->importing_from[s]) importing = 1;
            } else if (s != slot) {
                addReplyError(c, "-CROSSSLOT Keys in request don't hash to the same slot");
                replied = 1;
                goto done;
            }
            if ((migrating || importing) && keyIsHere(k, mc->cmd, migrating)) existing++;
            else if (migrating || importing) missing++;
        }
    }
    if (slot == -1) goto done; /* no key at all */
    if (!cs->state_ok) {
        addReplyError(c, "-CLUSTERDOWN The cluster is down");
        replied = 1;
        goto done;
    }
    /* MIGRATE works on the local node while the slot is open, so keys can
     * move in both directions. */
    if ((migrating || importing) && cmd->proc == migrateCommand) goto done;
    if (migrating && missing) {
        if (existing) {
            addReplyError(c, "-TRYAGAIN Multiple keys request during rehashing of slot");
        } else {
            if (ncmds == 1 && (cmd->proc == putEndCommand || cmd->proc == batchPutEndCommand))
                storeDropAskedPuts(c, c->argv, keys, nkeys);
            addReplyRedirect(c, "ASK", slot, cs->migrating_to[slot]);
        }
        replied = 1;
        goto done;
    }
    if (importing && ((c->flags & CLIENT_ASKING) || (cmd->flags & CMD_ASKING))) {
        if (existing + missing > 1 && missing) {
            addReplyError(c, "-TRYAGAIN Multiple keys request during rehashing of slot");
            replied = 1;
        }
        goto done;
    }
    /* A replica serves reads of its primary's slots to a READONLY client,
     * as Redis does; everything else goes to the primary. */
    if (n != cs->myself && (c->flags & CLIENT_READONLY) && !(cmd->flags & CMD_WRITE) && n == clusterMyPrimary() &&
        (cmd->proc != execCommand || !multiHasWrite(c)))
        goto done;
    if (n != cs->myself) {
        addReplyRedirect(c, "MOVED", slot, n);
        replied = 1;
    }
done:
    if (keys != stackkeys) zfree(keys);
    return replied;
}

/* ASKING is good for one command, as in Redis, or for a whole transaction
 * when it comes before MULTI. */
void clusterResetAsking(client *c) {
    if (c->cmd && c->cmd->proc == askingCommand) return;
    if (c->flags & CLIENT_MULTI) return;
    c->flags &= ~CLIENT_ASKING;
}

static int clusterEnabledOrReply(client *c) {
    if (server.cluster_enabled) return 1;
    addReplyError(c, "ERR This instance has cluster support disabled");
    return 0;
}

void askingCommand(client *c) {
    if (!clusterEnabledOrReply(c)) return;
    c->flags |= CLIENT_ASKING;
    addReplyOk(c);
}

void readonlyCommand(client *c) {
    if (!clusterEnabledOrReply(c)) return;
    c->flags |= CLIENT_READONLY;
    addReplyOk(c);
}

void readwriteCommand(client *c) {
    if (!clusterEnabledOrReply(c)) return;
    c->flags &= ~CLIENT_READONLY;
    addReplyOk(c);
}

/* ---- CLUSTER NODES / SLOTS / SHARDS / INFO ------------------------------------ */

/* Nodes of my group in a stable order (by id), myself included. */
static int groupNodes(clusterNode ***out) {
    clusterState *cs = server.cluster;
    clusterNode **v = zmalloc(sizeof(*v) * (dictSize(cs->nodes) + 1));
    int n = 0;
    dictIterator *it = dictGetSafeIterator(cs->nodes);
    dictEntry *de;
    while ((de = dictNext(it)) != NULL) {
        clusterNode *node = dictGetVal(de);
        if (clusterNodeInMyGroup(node)) v[n++] = node;
    }
    dictReleaseIterator(it);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(v[j - 1]->id, v[j]->id) > 0; j--) {
            clusterNode *t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    *out = v;
    return n;
}

static sds catNodeSlots(sds s, clusterNode *n) {
    clusterState *cs = server.cluster;
    for (int start = 0; start < CLUSTER_SLOTS;) {
        if (cs->slots[start] != n) {
            start++;
            continue;
        }
        int end = start;
        while (end + 1 < CLUSTER_SLOTS && cs->slots[end + 1] == n) end++;
        if (start == end) s = sdscatprintf(s, " %d", start);
        else s = sdscatprintf(s, " %d-%d", start, end);
        start = end + 1;
    }
    return s;
}

/* A replica shows its primary's config epoch, as Redis's nodeEpoch. */
static long long nodeEpoch(const clusterNode *n) {
    if (clusterNodeIsReplica(n) && n->primary[0]) {
        clusterNode *p = dictFetchValue(server.cluster->nodes, n->primary);
        if (p) return p->config_epoch;
    }
    return n->config_epoch;
}

static sds clusterGenNodeDescription(clusterNode *n) {
    clusterState *cs = server.cluster;
    int replica = clusterNodeIsReplica(n);
    sds s = sdscatprintf(sdsempty(), "%s %s:%d@%d %s%s%s %s 0 %lld %lld %s", n->id, n->ip, n->port, n->cport,
                         (n->flags & CNODE_MYSELF) ? "myself," : "", replica ? "slave" : "master",
                         (n->flags & CNODE_FAIL) ? ",fail" : "", replica && n->primary[0] ? n->primary : "-",
                         (n->flags & (CNODE_MYSELF | CNODE_FAIL)) ? 0LL : (long long)server.mstime,
                         nodeEpoch(n), (n->flags & CNODE_FAIL) ? "disconnected" : "connected");
    s = catNodeSlots(s, n);
    if (n == cs->myself) {
        for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
            if (cs->migrating_to[slot]) s = sdscatprintf(s, " [%d->-%s]", slot, cs->migrating_to[slot]->id);
            if (cs->importing_from[slot]) s = sdscatprintf(s, " [%d-<-%s]", slot, cs->importing_from[slot]->id);
        }
    }
    return s;
}

static sds genClusterNodes(void) {
    clusterNode **v;
    int n = groupNodes(&v);
    sds s = sdsempty();
    for (int i = 0; i < n; i++) {
        sds line = clusterGenNodeDescription(v[i]);
        s = sdscatsds(s, line);
        s = sdscat(s, "\n");
        sdsfree(line);
    }
    zfree(v);
    return s;
}

/* The replicas of primary p in my group, by id; returns how many. */
static int replicasOf(clusterNode *p, clusterNode ***out) {
    clusterNode **v;
    int n = groupNodes(&v), m = 0;
    for (int i = 0; i < n; i++)
        if (clusterNodeIsReplica(v[i]) && !strcmp(v[i]->primary, p->id)) v[m++] = v[i];
    *out = v;
    return m;
}

static void addReplyNodeEndpoint(client *c, clusterNode *n) {
    addReplyArrayLen(c, 4);
    addReplyBulkCString(c, n->ip);
    addReplyLongLong(c, n->port);
    addReplyBulkCString(c, n->id);
    addReplyMapLen(c, 0);
}

static void clusterSlotsReply(client *c) {
    clusterState *cs = server.cluster;
    long long nranges = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) addReplyArrayLen(c, nranges);
        for (int start = 0; start < CLUSTER_SLOTS;) {
            clusterNode *n = cs->slots[start];
            if (!n) {
                start++;
                continue;
            }
            int end = start;
            while (end + 1 < CLUSTER_SLOTS && cs->slots[end + 1] == n) end++;
            if (pass == 0) {
                nranges++;
            } else {
                clusterNode **reps;
                int nr = replicasOf(n, &reps), live = 0;
                for (int i = 0; i < nr; i++)
                    if (!(reps[i]->flags & CNODE_FAIL)) reps[live++] = reps[i];
                addReplyArrayLen(c, 3 + live);
                addReplyLongLong(c, start);
                addReplyLongLong(c, end);
                addReplyNodeEndpoint(c, n);
                for (int i = 0; i < live; i++) addReplyNodeEndpoint(c, reps[i]);
                zfree(reps);
            }
            start = end + 1;
        }
    }
}

static void addReplyShardNode(client *c, clusterNode *node) {
    addReplyMapLen(c, 7);
    addReplyBulkCString(c, "id");
    addReplyBulkCString(c, node->id);
    addReplyBulkCString(c, "port");
    addReplyLongLong(c, node->port);
    addReplyBulkCString(c, "ip");
    addReplyBulkCString(c, node->ip);
    addReplyBulkCString(c, "endpoint");
    addReplyBulkCString(c, node->ip);
    addReplyBulkCString(c, "role");
    addReplyBulkCString(c, clusterNodeIsReplica(node) ? "replica" : "master");
    addReplyBulkCString(c, "replication-offset");
    addReplyLongLong(c, node == server.cluster->myself ? replOffset() : 0);
    addReplyBulkCString(c, "health");
    addReplyBulkCString(c, (node->flags & CNODE_FAIL) ? "fail" : "online");
}

/* One shard per primary (and per replica whose primary is unknown): its
 * slots, then the primary and its replicas. */
static void clusterShardsReply(client *c) {
    clusterNode **v;
    int n = groupNodes(&v), shards = 0;
    for (int i = 0; i < n; i++)
        if (!clusterNodeIsReplica(v[i]) || !clusterLookupNode(v[i]->primary, strlen(v[i]->primary))) shards++;
    addReplyArrayLen(c, shards);
    for (int i = 0; i < n; i++) {
        clusterNode *node = v[i];
        if (clusterNodeIsReplica(node) && clusterLookupNode(node->primary, strlen(node->primary))) continue;
        addReplyMapLen(c, 2);
        addReplyBulkCString(c, "slots");
        sds ranges = catNodeSlots(sdsempty(), node);
        int cnt;
        sds *parts = sdssplitlen(ranges, sdslen(ranges), " ", 1, &cnt);
        long long m = 0;
        for (int j = 0; j < cnt; j++)
            if (sdslen(parts[j])) m++;
        addReplyArrayLen(c, m * 2);
        for (int j = 0; j < cnt; j++) {
            if (!sdslen(parts[j])) continue;
            char *dash = strchr(parts[j], '-');
            long long a = strtoll(parts[j], NULL, 10), b = dash ? strtoll(dash + 1, NULL, 10) : a;
            addReplyLongLong(c, a);
            addReplyLongLong(c, b);
        }
        sdsfreesplitres(parts, cnt);
        sdsfree(ranges);
        addReplyBulkCString(c, "nodes");
        clusterNode **reps;
        int nr = clusterNodeIsReplica(node) ? 0 : replicasOf(node, &reps);
        addReplyArrayLen(c, 1 + nr);
        addReplyShardNode(c, node);
        for (int j = 0; j < nr; j++) addReplyShardNode(c, reps[j]);
        if (!clusterNodeIsReplica(node)) zfree(reps);
    }
    zfree(v);
}

static sds genClusterInfo(void) {
    clusterState *cs = server.cluster;
    return sdscatprintf(sdsempty(),
                        "cluster_state:%s\r\n"
                        "cluster_slots_assigned:%lld\r\n"
                        "cluster_slots_ok:%lld\r\n"
                        "cluster_slots_pfail:0\r\n"
                        "cluster_slots_fail:%lld\r\n"
                        "cluster_known_nodes:%d\r\n"
                        "cluster_size:%d\r\n"
                        "cluster_current_epoch:%lld\r\n"
                        "cluster_my_epoch:%lld\r\n"
                        "cluster_stats_messages_sent:0\r\n"
                        "cluster_stats_messages_received:0\r\n"
                        "total_cluster_links_buffer_limit_exceeded:0\r\n"
                        "cluster_etcd_synced:%d\r\n"
                        "cluster_etcd_reachable:%d\r\n"
                        "cluster_etcd_revision:%lld\r\n"
                        "cluster_etcd_errors:%lld\r\n",
                        cs->state_ok ? "ok" : "fail", cs->slots_assigned, cs->slots_ok, cs->slots_fail, cs->known,
                        cs->size, cs->current_epoch, cs->myself->config_epoch, cs->synced,
                        cs->etcd_down_since == 0, cs->revision, cs->stat_etcd_errors);
}

sds clusterGenInfoSection(sds s) {
    return sdscatprintf(s, "cluster_enabled:%d\r\n", server.cluster_enabled ? 1 : 0);
}

void clusterCommand(client *c) {
    const char *sub = c->argv[1];
    if (!clusterEnabledOrReply(c)) return;
    clusterState *cs = server.cluster;
    if (!strcasecmp(sub, "help")) {
        static const char *help[] = {
            "ADDSLOTS <slot> [<slot> ...]", "    Assign slots to this node (written to etcd).",
            "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]", "    Assign slot ranges to this node.",
            "BUMPEPOCH", "    Advance this node's config epoch past every other.",
            "COUNTKEYSINSLOT <slot>", "    Return the number of keys in <slot>.",
            "DELSLOTS <slot> [<slot> ...]", "    Unassign slots.",
            "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]", "    Unassign slot ranges.",
            "FAILOVER [FORCE|TAKEOVER]", "    Promote this replica: planned, or without the primary.",
            "FORGET <node-id>", "    Remove a node from this cluster (its record stays in etcd).",
            "GETKEYSINSLOT <slot> <count>", "    Return key names stored by this node in a slot.",
            "INFO", "    Return information about the cluster.",
            "KEYSLOT <key>", "    Return the hash slot for <key>.",
            "MEET <ip> <port> [<bus-port>]", "    Join the cluster of the node at <ip>:<port> (found in etcd).",
            "MYID", "    Return this node's id.",
            "NODES", "    Return cluster configuration seen by node. Output format:",
            "    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...", "",
            "REPLICAS <node-id>", "    Return <node-id> replicas.",
            "REPLICATE <node-id>", "    Configure this node as a replica of <node-id> (written to etcd).",
            "RESET [HARD|SOFT]", "    Leave the cluster; HARD also takes a new id.",
            "SET-CONFIG-EPOCH <epoch>", "    Set config epoch of current node.",
            "SETSLOT <slot> (IMPORTING <node ID>|MIGRATING <node ID>|STABLE|NODE <node ID>)", "    Set slot state.",
            "SHARDS", "    Return information about slot range mappings and the nodes associated with them.",
            "SLOTS", "    Return information about slots range mappings. Each range is made of:",
            "    start, end, master and replicas IP addresses, ports and ids", "",
            NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "info") && c->argc == 2) {
        sds info = genClusterInfo();
        addReplyVerbatim(c, info, sdslen(info), "txt");
        sdsfree(info);
    } else if (!strcasecmp(sub, "myid") && c->argc == 2) {
        addReplyBulkCString(c, cs->myself->id);
    } else if (!strcasecmp(sub, "myshardid") && c->argc == 2) {
        addReplyBulkCString(c, cs->myself->id);
    } else if (!strcasecmp(sub, "nodes") && c->argc == 2) {
        sds nodes = genClusterNodes();
        addReplyVerbatim(c, nodes, sdslen(nodes), "txt");
        sdsfree(nodes);
    } else if (!strcasecmp(sub, "slots") && c->argc == 2) {
        clusterSlotsReply(c);
    } else if (!strcasecmp(sub, "shards") && c->argc == 2) {
        clusterShardsReply(c);
    } else if (!strcasecmp(sub, "keyslot") && c->argc == 3) {
        addReplyLongLong(c, keyHashSlot(c->argv[2], sdslen(c->argv[2])));
    } else if (!strcasecmp(sub, "countkeysinslot") && c->argc == 3) {
        long long slot;
        if (!string2ll(c->argv[2], sdslen(c->argv[2]), &slot)) {
            addReplyError(c, "ERR value is not an integer or out of range"); /* Redis's words, in its order */
            return;
        }
        if (slot < 0 || slot >= CLUSTER_SLOTS) {
            addReplyError(c, "ERR Invalid slot");
            return;
        }
        long long n = (long long)clusterCountKeysInSlot((int)slot);
        dict *d = cs->slot_keys[slot];
        if (aclUserRestricted(c->user) && d) {
            /* A tenant counts its own keys (acl.c): a walk of the slot, or
             * of its own keys (tenantkeys.c) where there are fewer. Either
             * way O(keys in the slot), a 16384th of the keyspace, counted
             * in INFO tenant_keys_walked. */
            long long own = tenantKeyCount(c->user);
            if (own >= 0 && own < (long long)dictSize(d)) {
                n = tenantCountKeysInSlot(c->user, (int)slot);
            } else {
                n = 0;
                dictIterator *it = dictGetSafeIterator(d);
                dictEntry *de;
                while ((de = dictNext(it)) != NULL) {
                    sds k = dictGetKey(de);
                    n += aclUserSeesKey(c->user, k, sdslen(k));
                    tenantKeysWalked++;
                }
                dictReleaseIterator(it);
            }
        }
        addReplyLongLong(c, n);
    } else if (!strcasecmp(sub, "getkeysinslot") && c->argc == 4) {
        long long slot, max;
        if (!string2ll(c->argv[2], sdslen(c->argv[2]), &slot) || !string2ll(c->argv[3], sdslen(c->argv[3]), &max)) {
            addReplyError(c, "ERR value is not an integer or out of range");
            return;
        }
        if (slot < 0 || slot >= CLUSTER_SLOTS || max < 0) {
            addReplyError(c, "ERR Invalid slot or number of keys");
            return;
        }
        /* Collected first: a user restricted by ACL key patterns is shown
         * only the keys it could access, as KEYS and SCAN do (acl.c). */
        dict *d = cs->slot_keys[slot];
        long long cap = d ? (long long)dictSize(d) : 0, n = 0;
        if (cap > max) cap = max;
        sds *keys = cap ? zmalloc(sizeof(sds) * (size_t)cap) : NULL;
        if (cap) {
            dictIterator *it = dictGetSafeIterator(d);
            dictEntry *de;
            while (n < cap && (de = dictNext(it)) != NULL) {
                sds k = dictGetKey(de);
                if (aclUserSeesKey(c->user, k, sdslen(k))) keys[n++] = k;
            }
            dictReleaseIterator(it);
        }
        addReplyArrayLen(c, n);
        for (long long i = 0; i < n; i++) addReplyBulk(c, keys[i], sdslen(keys[i]));
        zfree(keys);
    } else if (!strcasecmp(sub, "count-failure-reports") && c->argc == 3) {
        clusterNode *n = clusterLookupNode(c->argv[2], sdslen(c->argv[2]));
        if (!n) {
            addReplyErrorFormat(c, "ERR Unknown node %s", c->argv[2]);
            return;
        }
        addReplyLongLong(c, (n->flags & CNODE_FAIL) ? 1 : 0);
    } else if ((!strcasecmp(sub, "replicas") || !strcasecmp(sub, "slaves")) && c->argc == 3) {
        clusterNode *n = clusterLookupNode(c->argv[2], sdslen(c->argv[2]));
        if (!n || !clusterNodeInMyGroup(n)) {
            addReplyErrorFormat(c, "ERR Unknown node %s", c->argv[2]);
            return;
        }
        if (clusterNodeIsReplica(n)) {
            addReplyError(c, "ERR The specified node is not a master");
            return;
        }
        clusterNode **reps;
        int nr = replicasOf(n, &reps);
        addReplyArrayLen(c, nr);
        for (int i = 0; i < nr; i++) {
            sds line = clusterGenNodeDescription(reps[i]);
            addReplyBulkSds(c, line);
        }
        zfree(reps);
    } else if (!strcasecmp(sub, "links") && c->argc == 2) {
        addReplyArrayLen(c, 0);
    } else if (!strcasecmp(sub, "saveconfig") && c->argc == 2) {
        char err[256];
        if (clusterSaveNodeId(cs->myself->id, err, sizeof(err)) != C_OK) addReplyErrorFormat(c, "ERR %s", err);
        else addReplyOk(c);
    } else if (!strcasecmp(sub, "failover")) {
        replFailoverCommand(c);
    } else if (!strcasecmp(sub, "addslots") || !strcasecmp(sub, "addslotsrange") || !strcasecmp(sub, "delslots") ||
               !strcasecmp(sub, "delslotsrange") || !strcasecmp(sub, "setslot") || !strcasecmp(sub, "meet") ||
               !strcasecmp(sub, "forget") || !strcasecmp(sub, "reset") || !strcasecmp(sub, "set-config-epoch") ||
               !strcasecmp(sub, "bumpepoch") || !strcasecmp(sub, "replicate")) {
        clusterTopologyCommand(c, sub);
    } else {
        addReplySubcommandSyntaxError(c);
    }
}

void clusterCron(void) {
    if (!server.cluster) return;
    clusterSyncCron();
}
