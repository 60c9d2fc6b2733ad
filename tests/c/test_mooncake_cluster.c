/* test_mooncake_cluster.c -- libmooncake against a three-node cluster.
 *
 * The program starts everything it needs: an etcd (/usr/bin/etcd, free
 * ports, data in a mkdtemp directory), three mooncake-servers with
 * cluster-enabled (testserver.h: each its own directory, TCP port and unix
 * socket, 64 MiB pool, cluster-node-timeout 3000), joins them with
 * `redis-cli --cluster create ... --cluster-yes` and waits for
 * cluster_state:ok on every node. Every process is killed at exit (and by
 * the watchdog). Without etcd or redis-cli, or with a server that refuses
 * cluster-enabled, it prints a SKIP line and "0 passed, 0 failed".
 *
 * What is covered, and why each check can fail:
 *
 *  1. routing: values of 1 B .. 3 MiB under keys spread over all three
 *     shards, put through one node; each key is then found by a raw EXISTS
 *     on the owner the cluster names (CLUSTER KEYSLOT + CLUSTER SLOTS, not
 *     the library's own hashing), and read back byte for byte through
 *     other nodes, over shm and tcp. Segment ids are per node (every pool is
 *     segment 1), so a library that cached segments by id alone would read
 *     another shard's pool and fail the byte comparison. A 0-byte value is
 *     refused (MC_ERR_INVALID) exactly as on one node.
 *  2. batch: 150 keys over all shards plus 8 sharing a hash tag: every
 *     result MC_OK in order; per-key results of a batch get keep their
 *     places (a missing key, a small buffer, an existing key); the number
 *     of BATCH.PUT.START commands each node executed equals the number of
 *     distinct slots it owns among the keys (no -CROSSSLOT, no retries).
 *     Ranged reads (mc_batch_get_ranges) of 30 keys of every node, one key
 *     twice, one missing: each range byte-exact, and each node ran exactly
 *     one BATCH.GET.REPLICAS per slot; replica descriptions
 *     (mc_batch_replicas) name each key's owner's pool at the offset that
 *     node's GET.REPLICAS lists, with that node's tcp endpoint (segment ids
 *     are per node: a description built from the wrong node's table fails).
 *  3. exists/remove/size on keys of every shard; mc_batch_exists over 12
 *     keys of several slots with one missing (on another node than the
 *     first key): per-key results in order, and with PREFIX the first miss
 *     in the caller's order although later slot groups count past it --
 *     whose leases (LEASE) the library must end at once; mc_remove_all
 *     empties every primary and returns the sum of their DBSIZEs.
 *  4. mount: mc_mount over the cluster makes one slice per primary (SEGMENTS
 *     on each node: name, owner, 16 MiB); puts preferring it, from another
 *     handle and from the hosting one, put each replica in the slice on the
 *     key's owner (GET.REPLICAS there); reads come back byte-exact over shm
 *     (another handle) and tcp; the first value of every slice sits at
 *     offset 0 of its slice, so slices mapped onto the same memory would
 *     clobber each other. A node
 *     that lets the owner go (owner-ttl, connections killed) gets the slice
 *     mounted again by the heartbeat under a new id, and serves puts there.
 *  5. migrate: a slot moved by hand (SETSLOT IMPORTING/MIGRATING, MIGRATE,
 *     SETSLOT NODE on all nodes, through hiredis) while a handle with the
 *     old map is connected: reads of moved keys follow -ASK, a batch get
 *     over the half-moved slot (-TRYAGAIN) still reads everything in order,
 *     a new put in the migrating slot runs on the target (one PUT.START and
 *     one PUT.END there: PUT.END went behind ASKING), a batch put likewise;
 *     after SETSLOT NODE every value reads back through -MOVED, and the
 *     next reads go straight to the new owner (the old one sees none).
 *  6. put-moved: a value whose slot moves between PUT.START and PUT.END (a
 *     fake segment host moves the slot while it holds the SEG.WRITE) is put
 *     again on the new owner: one write into each node's segment, the key
 *     on the new owner with the new replica, the bytes right; and the same
 *     for a batch (BATCH.PUT.END redirected: the batch redone, in order);
 *     and a slot that only starts migrating meanwhile: the source answers
 *     that PUT.END with -ASK and drops the put (it would stay behind once
 *     the slot is given away), the put is redone on the target, and the
 *     key is there, and only there, once the move ends target first.
 *  7. cli: mooncake-cli put/get/ls/rm through different nodes.
 *  8. single node: against a server without cluster support the handle
 *     sends exactly what it always did (one CLUSTER probe instead of PING,
 *     no ASKING, one PUT.START/PUT.END/GET.REPLICAS per call).
 *
 * Usage: test_mooncake_cluster [group-substring]. The whole run takes
 * about ten seconds. MC_SERVER picks the server (testserver.h), MC_ETCD the
 * etcd binary, MC_CLI the mooncake-cli.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis.h>

#include "mooncake.h"
#include "testhelp.h"
#include "testserver.h"
#define GROUP_WATCHDOG_S 40 /* seconds a group may take (testgroup.h) */
#include "testgroup.h"
#include "mctest.h"

#define NNODES 3

/* ---- pattern data (mctest.h) ---------------------------------------------- */

/* Bytes that depend on the key and the size: a value read from the wrong
 * place cannot pass. */
static void fillFor(void *buf, size_t n, const char *key) { fillPattern(buf, n, seedOf(key, n) | 1); }

/* ---- processes ---------------------------------------------------------------- */

static tsServer node[NNODES];
static char node_id[NNODES][48];
static pid_t etcd_pid;
static char etcd_dir[96] = "";
static char etcd_url[64];
static int cluster_up;

static const char *findInPath(const char *name, char *out, size_t len) {
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s:/usr/bin:/usr/local/bin", path ? path : "");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/%s", d, name);
        if (access(out, X_OK) == 0) return out;
    }
    return NULL;
}

/* Runs argv with stdout+stderr appended to log; its exit status, or -1
 * when it did not finish within timeout_ms (then killed). */
static int runProgram(const char *const *argv, const char *log, int timeout_ms) {
    pid_t self = getpid(), pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        tsDieWithParent(self);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    tsTrack(pid);
    long long deadline = tsNowMs() + timeout_ms;
    int st;
    while (tsNowMs() < deadline) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            tsUntrack(pid);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        }
        tsSleepMs(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    tsUntrack(pid);
    return -1;
}

static void showFile(const char *path, int maxlines) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    fprintf(stderr, "---- %s ----\n", path);
    for (int n = 0; n < maxlines && fgets(line, sizeof(line), f); n++) fputs(line, stderr);
    fclose(f);
}

/* 1 once etcd's /health says true. */
static int etcdHealthy(int port) {
    int fd = tsConnectTcp(port);
    if (fd < 0) return 0;
    static const char req[] = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    char buf[1024];
    size_t got = 0;
    if (tsWriteAll(fd, req, sizeof(req) - 1) == 0) {
        long long deadline = tsNowMs() + 1000;
        for (;;) {
            struct pollfd p = {fd, POLLIN, 0};
            long long left = deadline - tsNowMs();
            if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
            ssize_t r = read(fd, buf + got, sizeof(buf) - 1 - got);
            if (r <= 0) break;
            got += (size_t)r;
            if (got >= sizeof(buf) - 1) break;
        }
    }
    close(fd);
    buf[got] = '\0';
    return strstr(buf, "\"health\":\"true\"") != NULL;
}

static int etcdStart(const char *bin) {
    if (testMkdtemp(etcd_dir, sizeof(etcd_dir), "mcetcd") != 0) return -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        int cport = tsFreePort(), pport = tsFreePort();
        if (cport <= 0 || pport <= 0 || cport == pport) continue;
        char data[128], log[128], client[64], peer[64], cluster[96];
        snprintf(data, sizeof(data), "%s/data", etcd_dir);
        snprintf(log, sizeof(log), "%s/etcd.log", etcd_dir);
        snprintf(client, sizeof(client), "http://127.0.0.1:%d", cport);
        snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", pport);
        snprintf(cluster, sizeof(cluster), "mct=%s", peer);
        const char *argv[] = {bin, "--name", "mct", "--data-dir", data, "--listen-client-urls", client,
                              "--advertise-client-urls", client, "--listen-peer-urls", peer,
                              "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster, NULL};
        pid_t self = getpid(), pid = fork();
        if (pid < 0) return -1;
        if (pid == 0) {
            tsDieWithParent(self);
            int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
            execv(bin, (char *const *)argv);
            _exit(127);
        }
        etcd_pid = pid;
        tsTrack(pid);
        long long deadline = tsNowMs() + 15000;
        while (tsNowMs() < deadline) {
            if (waitpid(pid, NULL, WNOHANG) == pid) break; /* died: a port taken meanwhile? */
            if (etcdHealthy(cport)) {
                snprintf(etcd_url, sizeof(etcd_url), "%s", client);
                return 0;
            }
            tsSleepMs(50);
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        tsUntrack(pid);
        etcd_pid = 0;
        showFile(log, 30);
    }
    return -1;
}

static void rmTree(const char *dir) {
    if (!dir[0]) return;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", dir);
}

/* ---- hiredis helpers --------------------------------------------------------- */

static redisContext *rctx[NNODES];

static redisContext *rNode(int i) {
    if (rctx[i]) return rctx[i];
    struct timeval tv = {5, 0};
    char where[32];
    snprintf(where, sizeof(where), "to node %d", i);
    return rctx[i] = rConfigure(redisConnectWithTimeout("127.0.0.1", node[i].port, tv), where);
}

static redisReply *rcmd(int i, const char *fmt, ...) {
    redisContext *c = rNode(i);
    if (!c) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        fprintf(stderr, "  hiredis node %d: %s\n", i, c->errstr);
        redisFree(c);
        rctx[i] = NULL;
    }
    return r;
}

/* Runs a command on node i that must answer +OK. */
static int rOk(int i, const char *fmt, ...) {
    redisContext *c = rNode(i);
    if (!c) return 0;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    int ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK");
    if (!ok) {
        char what[160];
        snprintf(what, sizeof(what), "node %d: %s", i, fmt);
        showReply(what, r);
    }
    freeReplyObject(r);
    return ok;
}

static int nodeOfPort(long long port) {
    for (int i = 0; i < NNODES; i++)
        if (node[i].port == port) return i;
    return -1;
}

/* A field of node i's INFO store, -1 if absent. */
static long long infoStoreField(int i, const char *field) {
    redisReply *r = rcmd(i, "INFO store");
    long long v = infoField(r, field);
    freeReplyObject(r);
    return v;
}

/* The slot of key as the cluster computes it. */
static int keySlot(const char *key) {
    redisReply *r = rcmd(0, "CLUSTER KEYSLOT %s", key);
    int s = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    freeReplyObject(r);
    return s;
}

/* The node owning slot, by node 0's CLUSTER SLOTS; -1 if unknown. */
static int slotOwner(int slot) {
    redisReply *r = rcmd(0, "CLUSTER SLOTS");
    int owner = -1;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) continue;
        if (slot >= replyInt(e->element[0]) && slot <= replyInt(e->element[1]) &&
            e->element[2]->type == REDIS_REPLY_ARRAY && e->element[2]->elements >= 2)
            owner = nodeOfPort(replyInt(e->element[2]->element[1]));
    }
    freeReplyObject(r);
    return owner;
}

static int ownerOf(const char *key) {
    int s = keySlot(key);
    return s < 0 ? -1 : slotOwner(s);
}

/* EXISTS key on node i, raw: 1, 0, or -1 (an error, such as MOVED). */
static int rawExists(int i, const char *key) {
    redisReply *r = rcmd(i, "EXISTS %s", key);
    int v = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    freeReplyObject(r);
    return v;
}

/* A field of a flat RESP2 map. */
static const redisReply *mapGet(const redisReply *m, const char *field) {
    if (!m || m->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < m->elements; i += 2)
        if ((m->element[i]->type == REDIS_REPLY_STRING || m->element[i]->type == REDIS_REPLY_STATUS) &&
            !strcmp(m->element[i]->str, field))
            return m->element[i + 1];
    return NULL;
}

/* The id and size of the segment named name on node i whose owner ends
 * with owner_tail; 0 if there is none. */
static long long segmentNamed(int i, const char *name, const char *owner_tail, long long *size) {
    redisReply *r = rcmd(i, "SEGMENTS");
    long long id = 0;
    for (size_t j = 0; r && r->type == REDIS_REPLY_ARRAY && j < r->elements; j++) {
        const redisReply *m = r->element[j], *n = mapGet(m, "name"), *o = mapGet(m, "owner");
        if (!n || !o || !n->str || !o->str || strcmp(n->str, name)) continue;
        size_t ol = strlen(o->str), tl = strlen(owner_tail);
        if (ol < tl || strcmp(o->str + ol - tl, owner_tail)) continue;
        id = replyInt(mapGet(m, "id"));
        if (size) *size = replyInt(mapGet(m, "size"));
    }
    freeReplyObject(r);
    return id;
}

/* The first replica GET.REPLICAS lists for key on node i: segment id and
 * offset; 0 if none (shown). */
static long long firstReplica(int i, const char *key, long long *off) {
    redisReply *r = rcmd(i, "GET.REPLICAS %s", key);
    long long seg = 0;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 4 && r->element[3]->type == REDIS_REPLY_ARRAY &&
        r->element[3]->elements == 3) {
        seg = replyInt(r->element[3]->element[0]);
        if (off) *off = replyInt(r->element[3]->element[1]);
    } else {
        char what[200];
        snprintf(what, sizeof(what), "GET.REPLICAS %s on node %d", key, i);
        showReply(what, r);
    }
    freeReplyObject(r);
    return seg;
}

/* calls+rejected_calls of a command in node i's INFO commandstats. */
static long long cmdCalls(int i, const char *cmd) {
    redisReply *r = rcmd(i, "INFO commandstats");
    long long n = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        char needle[96];
        snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", cmd);
        const char *p = strstr(r->str, needle);
        if (p) {
            n = strtoll(p + strlen(needle), NULL, 10);
            const char *rej = strstr(p, "rejected_calls=");
            const char *eol = strchr(p, '\n');
            if (rej && (!eol || rej < eol)) n += strtoll(rej + 15, NULL, 10);
        }
    }
    freeReplyObject(r);
    return n;
}

static void resetStats(void) {
    for (int i = 0; i < NNODES; i++) rOk(i, "CONFIG RESETSTAT");
}

/* ---- libmooncake helpers ----------------------------------------------------- */

static mc_client *mcOpen(const char *uri, int transport) {
    char err[256] = "";
    mc_client *c = mc_connect(uri, NULL, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "  mc_connect(%s): %s\n", uri, err);
        return NULL;
    }
    if (transport != MC_TRANSPORT_AUTO) mc_set_transport(c, transport);
    return c;
}

static int putKey(mc_client *c, const char *key, size_t n, const mc_put_opts *o) {
    char *buf = xmalloc(n);
    fillFor(buf, n, key);
    int rc = c ? mc_put(c, key, strlen(key), buf, n, o) : MC_ERR_INVALID;
    if (rc != MC_OK) fprintf(stderr, "  mc_put(%s, %zu): %d %s (%s)\n", key, n, rc, mc_strerror(rc), c ? mc_last_error(c) : "");
    free(buf);
    return rc;
}

/* key reads back as its pattern; want_transport AUTO: any. */
static int getKey(mc_client *c, const char *key, size_t n, int want_transport) {
    if (!c) return 0;
    char *want = xmalloc(n), *got = xmalloc(n + 1);
    fillFor(want, n, key);
    long long r = mc_get(c, key, strlen(key), got, n + 1);
    char what[200];
    snprintf(what, sizeof(what), "mc_get(%s)", key);
    int ok = sameBytes(what, got, r, want, n);
    if (r < 0) fprintf(stderr, "    (%s)\n", mc_last_error(c));
    if (ok && want_transport != MC_TRANSPORT_AUTO && mc_last_transport(c) != want_transport) {
        fprintf(stderr, "  mc_get(%s): moved by transport %d, not %d\n", key, mc_last_transport(c), want_transport);
        ok = 0;
    }
    free(want);
    free(got);
    return ok;
}

/* ==== setup ====================================================================== */

static const char *skip_reason;

static void clusterStart(void) {
    char etcd_bin[512], cli_bin[512];
    const char *env_etcd = getenv("MC_ETCD"); /* another etcd, or a missing one to see the SKIP */
    if (env_etcd && *env_etcd) snprintf(etcd_bin, sizeof(etcd_bin), "%s", env_etcd);
    else if (access("/usr/bin/etcd", X_OK) == 0) snprintf(etcd_bin, sizeof(etcd_bin), "/usr/bin/etcd");
    else if (!findInPath("etcd", etcd_bin, sizeof(etcd_bin))) etcd_bin[0] = '\0';
    if (!etcd_bin[0] || access(etcd_bin, X_OK) != 0) {
        skip_reason = "no etcd binary (Debian package etcd-server)";
        return;
    }
    if (!findInPath("redis-cli", cli_bin, sizeof(cli_bin))) {
        skip_reason = "no redis-cli (Debian package redis-tools)";
        return;
    }
    TEST("setup: etcd starts on free ports") CHECK(etcdStart(etcd_bin) == 0);
    if (!etcd_pid) return;
    char name[64];
    snprintf(name, sizeof(name), "mct%d", (int)getpid());
    for (int i = 0; i < NNODES; i++) {
        /* The bus port defaults to port + 10000, past 65535 for the high
         * free ports tsStart picks (nothing listens there: etcd is the bus). */
        char bus[16];
        snprintf(bus, sizeof(bus), "%d", tsFreePort());
        int rc = tsStart(&node[i], "--cluster-enabled", "yes", "--cluster-etcd-endpoints", etcd_url, "--cluster-name",
                         name, "--cluster-node-timeout", "3000", "--segment-size", "64mb",
                         "--cluster-announce-bus-port", bus, NULL);
        if (rc != 0) {
            if (i == 0 && tsLogHas(&node[0], "cluster-enabled") &&
                (tsLogHas(&node[0], "Bad directive") || tsLogHas(&node[0], "FATAL"))) {
                skip_reason = "the server refuses --cluster-enabled yes";
                tsCleanup(&node[0]);
                return;
            }
            TEST("setup: three cluster nodes start") CHECK(rc == 0);
            return;
        }
    }
    TEST("setup: redis-cli --cluster create joins the three nodes") {
        char addr[NNODES][32], log[128];
        const char *argv[8 + NNODES];
        int argc = 0;
        argv[argc++] = cli_bin;
        argv[argc++] = "--cluster";
        argv[argc++] = "create";
        for (int i = 0; i < NNODES; i++) {
            snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", node[i].port);
            argv[argc++] = addr[i];
        }
        argv[argc++] = "--cluster-yes";
        argv[argc] = NULL;
        snprintf(log, sizeof(log), "%s/create.log", etcd_dir);
        int st = runProgram(argv, log, 30000);
        CHECK_EQ(st, 0);
        if (st != 0) showFile(log, 60);
    }
    TEST("setup: cluster_state:ok on every node") {
        int ok = 0;
        for (long long deadline = tsNowMs() + 15000; !ok && tsNowMs() < deadline; tsSleepMs(50)) {
            ok = 1;
            for (int i = 0; i < NNODES && ok; i++) {
                redisReply *r = rcmd(i, "CLUSTER INFO");
                ok = r && r->type == REDIS_REPLY_STRING &&
                     strstr(r->str, "cluster_state:ok") != NULL;
                freeReplyObject(r);
            }
        }
        CHECK(ok);
        for (int i = 0; i < NNODES; i++) {
            redisReply *r = rcmd(i, "CLUSTER MYID");
            if (r && r->type == REDIS_REPLY_STRING) snprintf(node_id[i], sizeof(node_id[i]), "%s", r->str);
            CHECK(node_id[i][0] != '\0');
            freeReplyObject(r);
        }
        cluster_up = ok;
    }
}

static void clusterStop(int failed_before) {
    for (int i = 0; i < NNODES; i++) {
        if (rctx[i]) redisFree(rctx[i]);
        rctx[i] = NULL;
    }
    for (int i = 0; i < NNODES; i++) {
        if (!node[i].pid && !node[i].dir[0]) continue;
        char name[32];
        snprintf(name, sizeof(name), "teardown: node %d", i + 1);
        if (node[i].pid) tsGroupFinish(&node[i], name, failed_before);
        else tsCleanup(&node[i]);
    }
    if (etcd_pid) {
        kill(etcd_pid, SIGTERM);
        long long deadline = tsNowMs() + 5000;
        while (tsNowMs() < deadline && waitpid(etcd_pid, NULL, WNOHANG) != etcd_pid) tsSleepMs(10);
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
        tsUntrack(etcd_pid);
        etcd_pid = 0;
    }
    rmTree(etcd_dir);
}

/* ==== 1. routing ================================================================== */

static const size_t rt_sizes[] = {1, 100, 4095, 4096, 64 * KiB + 3, 1 * MiB, 3 * MiB + 5};
#define RT_N 42

static void rtKey(char *key, size_t cap, int i) { snprintf(key, cap, "cl:rt:%d", i); }
static size_t rtSize(int i) { return rt_sizes[i % (sizeof(rt_sizes) / sizeof(rt_sizes[0]))]; }

static void testRouting(void) {
    mc_client *c = mcOpen(node[0].tcp_uri, MC_TRANSPORT_AUTO);
    TEST("routing: a 0-byte value is refused (MC_ERR_INVALID), as on one node") {
        char b = 0;
        CHECK(c != NULL);
        if (c) CHECK_EQ(mc_put(c, "cl:zero", 7, &b, 0, NULL), MC_ERR_INVALID);
        if (c) CHECK_EQ(mc_exists(c, "cl:zero", 7), 0);
    }
    TEST("routing: 42 values of 1 B .. 3 MiB put through node 1, each on its slot's owner, all 3 nodes used") {
        int per[NNODES] = {0};
        for (int i = 0; i < RT_N; i++) {
            char key[32];
            rtKey(key, sizeof(key), i);
            CHECK_EQ(putKey(c, key, rtSize(i), NULL), MC_OK);
            int o = ownerOf(key);
            CHECK(o >= 0);
            if (o < 0) continue;
            int e = rawExists(o, key);
            if (e != 1) fprintf(stderr, "  %s: EXISTS on its owner (node %d) is %d\n", key, o + 1, e);
            CHECK_EQ(e, 1);
            per[o]++;
        }
        for (int i = 0; i < NNODES; i++) CHECK(per[i] > 0);
    }
    TEST("routing: every value reads back byte for byte through node 1 (tcp connection)") {
        for (int i = 0; i < RT_N; i++) {
            char key[32];
            rtKey(key, sizeof(key), i);
            CHECK(getKey(c, key, rtSize(i), MC_TRANSPORT_AUTO));
        }
    }
    mc_client *u = mcOpen(node[2].unix_uri, MC_TRANSPORT_SHM);
    TEST("routing: through node 3's unix socket, forced shm, every value byte for byte (pools of 3 nodes)") {
        CHECK(u != NULL);
        for (int i = 0; u && i < RT_N; i++) {
            char key[32];
            rtKey(key, sizeof(key), i);
            CHECK(getKey(u, key, rtSize(i), MC_TRANSPORT_SHM));
        }
    }
    mc_client *t = mcOpen(node[1].tcp_uri, MC_TRANSPORT_TCP);
    TEST("routing: through node 2, forced tcp, every value byte for byte; mc_size right") {
        CHECK(t != NULL);
        for (int i = 0; t && i < RT_N; i++) {
            char key[32];
            rtKey(key, sizeof(key), i);
            CHECK(getKey(t, key, rtSize(i), MC_TRANSPORT_TCP));
            CHECK_EQ(mc_size(t, key, strlen(key)), (long long)rtSize(i));
        }
    }
    mcClose(&u);
    mcClose(&t);
    mcClose(&c);
}

/* ==== 2. batches ==================================================================== */

#define BT_N 150
#define BT_TAGGED 8
#define BT_ALL (BT_N + BT_TAGGED)

static void btKey(char *key, size_t cap, int i) {
    if (i < BT_N) snprintf(key, cap, "cl:bt:%d", i);
    else snprintf(key, cap, "{cl:tag}:%d", i - BT_N);
}
static size_t btSize(int i) { return i % 5 == 0 ? 200 * KiB + (size_t)i : 1000 + (size_t)i; }

static void testBatch(void) {
    mc_client *c = mcOpen(node[1].tcp_uri, MC_TRANSPORT_AUTO);
    static char keys[BT_ALL + 2][32];
    mc_kv *items = xmalloc((BT_ALL + 2) * sizeof(*items));
    char **vals = xmalloc((BT_ALL + 2) * sizeof(char *));
    int *pres = xmalloc((BT_ALL + 2) * sizeof(int));
    long long *gres = xmalloc((BT_ALL + 2) * sizeof(long long));
    for (int i = 0; i < BT_ALL; i++) {
        btKey(keys[i], sizeof(keys[i]), i);
        vals[i] = xmalloc(btSize(i));
        fillFor(vals[i], btSize(i), keys[i]);
        items[i] = (mc_kv){keys[i], strlen(keys[i]), vals[i], btSize(i)};
    }
    /* Distinct (node, slot) pairs among the keys: the commands expected. */
    static int slot_of[BT_ALL];
    long long want_cmds[NNODES] = {0};
    int per[NNODES] = {0};
    for (int i = 0; i < BT_ALL; i++) {
        slot_of[i] = keySlot(keys[i]);
        int o = slotOwner(slot_of[i]), seen = 0;
        if (o < 0) continue;
        per[o]++;
        for (int j = 0; j < i && !seen; j++) seen = slot_of[j] == slot_of[i];
        if (!seen) want_cmds[o]++;
    }
    resetStats();
    TEST("batch: mc_batch_put of 158 keys over all 3 nodes (8 sharing a hash tag): every result MC_OK, in order") {
        CHECK(c != NULL);
        for (int i = 0; i < NNODES; i++) CHECK(per[i] > 0);
        int n = c ? mc_batch_put(c, BT_ALL, items, NULL, pres) : -1;
        CHECK_EQ(n, BT_ALL);
        if (n != BT_ALL && c) fprintf(stderr, "    (%s)\n", mc_last_error(c));
        for (int i = 0; i < BT_ALL; i++) {
            if (pres[i] != MC_OK) fprintf(stderr, "  item %d (%s): %d\n", i, keys[i], pres[i]);
            CHECK_EQ(pres[i], MC_OK);
        }
    }
    TEST("batch: each node ran one BATCH.PUT.START per slot it owns among the keys (no CROSSSLOT, no retry)") {
        for (int i = 0; i < NNODES; i++) {
            long long got = cmdCalls(i, "batch.put.start");
            if (got != want_cmds[i]) fprintf(stderr, "  node %d: %lld BATCH.PUT.START, want %lld\n", i + 1, got, want_cmds[i]);
            CHECK_EQ(got, want_cmds[i]);
        }
    }
    TEST("batch: every key is on its slot's owner") {
        for (int i = 0; i < BT_ALL; i += 7) {
            int o = slotOwner(slot_of[i]);
            CHECK(o >= 0 && rawExists(o, keys[i]) == 1);
        }
    }
    /* A get batch: the keys, a missing key at 3 and a small buffer at 10. */
    TEST("batch: mc_batch_get through node 3 (shm): byte-exact, in order, a missing key and a small buffer fail alone") {
        mc_client *g = mcOpen(node[2].unix_uri, MC_TRANSPORT_AUTO);
        CHECK(g != NULL);
        int n = BT_ALL + 1;
        mc_kv *gi = xmalloc((size_t)n * sizeof(*gi));
        char **bufs = xmalloc((size_t)n * sizeof(char *));
        for (int i = 0, j = 0; i < n; i++) {
            if (i == 3) {
                gi[i] = (mc_kv){"cl:bt:missing", 13, xmalloc(16), 16};
                bufs[i] = gi[i].buf;
                continue;
            }
            size_t cap = j == 10 ? btSize(j) - 1 : btSize(j);
            bufs[i] = xmalloc(btSize(j));
            gi[i] = (mc_kv){keys[j], strlen(keys[j]), bufs[i], cap};
            j++;
        }
        int got = g ? mc_batch_get(g, (size_t)n, gi, gres) : -1;
        CHECK_EQ(got, BT_ALL - 1);
        for (int i = 0, j = 0; i < n; i++) {
            if (i == 3) {
                CHECK_EQ(gres[i], MC_ERR_NOT_FOUND);
                continue;
            }
            if (j == 10) CHECK_EQ(gres[i], MC_ERR_TOO_SMALL);
            else {
                char what[64];
                snprintf(what, sizeof(what), "batch item %d (%s)", i, keys[j]);
                CHECK(sameBytes(what, bufs[i], gres[i], vals[j], btSize(j)));
            }
            j++;
        }
        for (int i = 0; i < n; i++) free(bufs[i]);
        free(bufs);
        free(gi);
        mcClose(&g);
    }
    TEST("batch: a put batch with existing keys of every node: those fail alone (EXISTS), new ones land") {
        mc_kv mix[6];
        int res[6];
        char nk[3][32];
        for (int i = 0; i < 3; i++) {
            snprintf(nk[i], sizeof(nk[i]), "cl:bt:new%d", i);
            mix[2 * i] = items[i * 40]; /* exists */
            mix[2 * i + 1] = (mc_kv){nk[i], strlen(nk[i]), vals[i], btSize(i)};
        }
        int n = c ? mc_batch_put(c, 6, mix, NULL, res) : -1;
        CHECK_EQ(n, 3);
        for (int i = 0; i < 3; i++) {
            CHECK_EQ(res[2 * i], MC_ERR_EXISTS);
            CHECK_EQ(res[2 * i + 1], MC_OK);
            CHECK(getKey(c, keys[i * 40], btSize(i * 40), MC_TRANSPORT_AUTO)); /* unchanged */
        }
    }
    TEST("batch: mc_batch_putv / mc_batch_getv of 40 keys over all nodes and slots, each in 3 pieces then 2 (tcp)") {
        /* Item i's value is vals[i]'s bytes, put from three separate
         * allocations (the middle one empty for every third item) and read
         * back into two others; a missing key in the get fails alone. */
        enum { NV = 40 };
        mc_client *t = mcOpen(node[0].tcp_uri, MC_TRANSPORT_TCP);
        CHECK(t != NULL);
        char vk[NV + 1][32];
        struct iovec (*piov)[3] = xmalloc(NV * sizeof(*piov)), (*giov)[2] = xmalloc((NV + 1) * sizeof(*giov));
        mc_kvv *pv = xmalloc(NV * sizeof(*pv)), *gv = xmalloc((NV + 1) * sizeof(*gv));
        int *pr = xmalloc(NV * sizeof(int));
        long long *gr = xmalloc((NV + 1) * sizeof(long long));
        for (int i = 0; i < NV; i++) {
            size_t n = btSize(i), a = n / 3, m = i % 3 == 0 ? 0 : n / 4;
            snprintf(vk[i], sizeof(vk[i]), "cl:sg:%d", i);
            size_t cut[3] = {a, m, n - a - m};
            const char *src = vals[i];
            for (int k = 0; k < 3; k++) {
                piov[i][k].iov_base = xmalloc(cut[k] + 1);
                piov[i][k].iov_len = cut[k];
                memcpy(piov[i][k].iov_base, src, cut[k]);
                src += cut[k];
            }
            pv[i] = (mc_kvv){vk[i], strlen(vk[i]), piov[i], 3};
        }
        int n = t ? mc_batch_putv(t, NV, pv, NULL, pr) : -1;
        CHECK_EQ(n, NV);
        if (n != NV && t) fprintf(stderr, "    (%s)\n", mc_last_error(t));
        for (int i = 0, j = 0; i < NV + 1; i++) {
            if (i == 7) { /* the missing one */
                snprintf(vk[NV], sizeof(vk[NV]), "cl:sg:missing");
                giov[i][0] = (struct iovec){xmalloc(8), 8};
                giov[i][1] = (struct iovec){NULL, 0};
                gv[i] = (mc_kvv){vk[NV], strlen(vk[NV]), giov[i], 2};
                continue;
            }
            size_t sz = btSize(j), h = sz / 2 + 1;
            giov[i][0] = (struct iovec){xmalloc(h), h};
            giov[i][1] = (struct iovec){xmalloc(sz - h), sz - h};
            gv[i] = (mc_kvv){vk[j], strlen(vk[j]), giov[i], 2};
            j++;
        }
        int got = t ? mc_batch_getv(t, NV + 1, gv, gr) : -1;
        CHECK_EQ(got, NV);
        CHECK_EQ(gr[7], MC_ERR_NOT_FOUND);
        char *flat = xmalloc(300 * KiB);
        for (int i = 0, j = 0; i < NV + 1; i++) {
            if (i == 7) continue;
            size_t sz = btSize(j);
            memcpy(flat, giov[i][0].iov_base, giov[i][0].iov_len);
            memcpy(flat + giov[i][0].iov_len, giov[i][1].iov_base, giov[i][1].iov_len);
            char what[64];
            snprintf(what, sizeof(what), "batch v item %d (%s)", i, vk[j]);
            CHECK(sameBytes(what, flat, gr[i], vals[j], sz));
            j++;
        }
        /* A plain get of a scattered put: the same bytes. */
        long long r5 = t ? mc_get(t, vk[5], strlen(vk[5]), flat, 300 * KiB) : -1;
        CHECK(sameBytes("mc_get of a scattered put", flat, r5, vals[5], btSize(5)));
        free(flat);
        for (int i = 0; i < NV; i++)
            for (int k = 0; k < 3; k++) free(piov[i][k].iov_base);
        for (int i = 0; i < NV + 1; i++)
            for (int k = 0; k < 2; k++) free(giov[i][k].iov_base);
        free(piov);
        free(giov);
        free(pv);
        free(gv);
        free(pr);
        free(gr);
        mcClose(&t);
    }
    TEST("batch: mc_batch_get_ranges over 30 keys of every node (one key twice, one missing): one BATCH.GET.REPLICAS per node and slot, bytes right") {
        enum { NR = 30, NI = NR + 2 };
        mc_client *t = mcOpen(node[2].tcp_uri, MC_TRANSPORT_TCP);
        CHECK(t != NULL);
        char *arena = xmalloc(NI * 2 * 256);
        mc_range (*g)[2] = xmalloc(NI * sizeof(*g));
        mc_kranges ri[NI];
        long long rres[NI * 2];
        long long want_get[NNODES] = {0};
        int slots[NI];
        for (int i = 0; i < NI; i++) {
            const char *k = i < NR ? keys[i] : i == NR ? keys[0] : "cl:bt:missing";
            size_t sz = btSize(i < NR ? i : 0);
            g[i][0] = (mc_range){arena + (size_t)i * 512, 0, 100};
            g[i][1] = (mc_range){arena + (size_t)i * 512 + 256, sz - 50, 50}; /* the object's end */
            ri[i] = (mc_kranges){k, strlen(k), g[i], 2};
            slots[i] = keySlot(k);
            int o = slotOwner(slots[i]), seen = 0;
            for (int j = 0; j < i && !seen; j++) seen = slots[j] == slots[i];
            if (o >= 0 && !seen) want_get[o]++;
        }
        resetStats();
        int rc = t && mc_register(t, arena, NI * 2 * 256, MC_MEM_HOST) == MC_OK ? mc_batch_get_ranges(t, NI, ri, rres) : -1;
        CHECK_EQ(rc, 2 * (NR + 1));
        if (rc != 2 * (NR + 1) && t) fprintf(stderr, "    (%s)\n", mc_last_error(t));
        for (int i = 0; i < NR + 1; i++) {
            const char *v = vals[i < NR ? i : 0];
            size_t sz = btSize(i < NR ? i : 0);
            char what[64];
            snprintf(what, sizeof(what), "ranges of item %d, head", i);
            CHECK(sameBytes(what, g[i][0].dst, rres[2 * i], v, 100));
            snprintf(what, sizeof(what), "ranges of item %d, tail", i);
            CHECK(sameBytes(what, g[i][1].dst, rres[2 * i + 1], v + sz - 50, 50));
        }
        CHECK(rres[2 * NI - 2] == MC_ERR_NOT_FOUND && rres[2 * NI - 1] == MC_ERR_NOT_FOUND);
        for (int i = 0; i < NNODES; i++) {
            long long got = cmdCalls(i, "batch.get.replicas");
            if (got != want_get[i]) fprintf(stderr, "  node %d: %lld BATCH.GET.REPLICAS, want %lld\n", i + 1, got, want_get[i]);
            CHECK_EQ(got, want_get[i]);
        }
        free(g);
        free(arena);
        mcClose(&t);
    }
    TEST("batch: mc_batch_replicas of keys of every node: each in its owner's pool (segment 1 'self', the owner's tcp endpoint)") {
        enum { ND = 12 };
        mc_key dk[ND + 1];
        mc_replicas *d = xmalloc((ND + 1) * sizeof(*d));
        int dres[ND + 1];
        for (int i = 0; i < ND; i++) dk[i] = (mc_key){keys[i], strlen(keys[i])};
        dk[ND] = (mc_key){"cl:bt:missing", 13};
        int rc = c ? mc_batch_replicas(c, ND + 1, dk, d, dres) : -1;
        CHECK_EQ(rc, ND);
        CHECK_EQ(dres[ND], MC_ERR_NOT_FOUND);
        int per[NNODES] = {0};
        for (int i = 0; i < ND && rc == ND; i++) {
            int o = ownerOf(keys[i]);
            long long off = -1, seg = o >= 0 ? firstReplica(o, keys[i], &off) : 0;
            if (o >= 0) freeReplyObject(rcmd(o, "LEASE.RELEASE %s", keys[i]));
            char ep[64];
            snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", o >= 0 ? node[o].port : 0);
            const mc_replica_info *x = &d[i].replicas[0];
            int ok = dres[i] == 1 && d[i].nreplicas == 1 && d[i].size == btSize(i) && seg == 1 && x->seg_id == 1 &&
                     (long long)x->offset == off && x->len == btSize(i) && !strcmp(x->seg_name, "self") &&
                     !strcmp(x->endpoint, ep);
            if (!ok)
                fprintf(stderr, "  %s (node %d): result %d, %d replicas, seg %llu '%s' at %llu (GET.REPLICAS: %lld at %lld), '%s' (want '%s')\n",
                        keys[i], o + 1, dres[i], d[i].nreplicas, (unsigned long long)x->seg_id, x->seg_name,
                        (unsigned long long)x->offset, seg, off, x->endpoint, ep);
            CHECK(ok);
            if (o >= 0) per[o]++;
        }
        for (int i = 0; i < NNODES; i++) CHECK(per[i] > 0);
        free(d);
    }
    TEST("batch: mc_batch_get_views through node 3 (shm) of keys of every node: byte-exact, held on each key's owner until released") {
        enum { NV = 12 };
        mc_client *g = mcOpen(node[2].unix_uri, MC_TRANSPORT_AUTO);
        CHECK(g != NULL);
        if (!g) break;
        mc_key vk[NV + 1];
        mc_view *v[NV + 1];
        long long vres[NV + 1];
        int per[NNODES] = {0};
        for (int i = 0; i < NV; i++) {
            vk[i] = (mc_key){keys[i], strlen(keys[i])};
            int o = ownerOf(keys[i]);
            if (o >= 0) per[o]++;
        }
        vk[NV] = (mc_key){"cl:bt:missing", 13};
        CHECK_EQ(mc_batch_get_views(g, NV + 1, vk, v, vres), NV);
        CHECK_EQ(vres[NV], MC_ERR_NOT_FOUND);
        for (int i = 0; i < NV; i++) {
            char what[64];
            snprintf(what, sizeof(what), "view %d (%s)", i, keys[i]);
            CHECK(v[i] && sameBytes(what, mc_view_data(v[i]), vres[i], vals[i], btSize(i)));
        }
        for (int o = 0; o < NNODES; o++) {
            CHECK(per[o] > 0);
            CHECK_EQ(infoStoreField(o, "store_holds"), per[o]);
        }
        for (int i = 0; i <= NV; i++) mc_view_release(v[i]);
        int ex[NV];
        CHECK_EQ(mc_batch_exists(g, NV, vk, 0, ex), NV); /* a request to every node: the releases go with it */
        for (int o = 0; o < NNODES; o++) {
            long long h = -1;
            for (int t = 0; t < 200 && (h = infoStoreField(o, "store_holds")) != 0; t++) usleep(10 * 1000);
            CHECK_EQ(h, 0);
        }
        mcClose(&g);
    }
    for (int i = 0; i < BT_ALL; i++) free(vals[i]);
    free(vals);
    free(items);
    free(pres);
    free(gres);
    mcClose(&c);
}

/* ==== 3. exists / remove ============================================================ */

/* lease-ms of key on node i (OBJECT.INFO there), -1 if absent. */
static long long leaseOn(int i, const char *key) {
    redisReply *r = rcmd(i, "OBJECT.INFO %s", key);
    const redisReply *f = r && r->type == REDIS_REPLY_ARRAY ? mapGet(r, "lease-ms") : NULL;
    long long ms = f ? replyInt(f) : -1;
    freeReplyObject(r);
    return ms;
}

#define BX_N 12

/* mc_batch_exists over keys of several slots and nodes, one missing in
 * the middle: each slot group counts on its own, and the library must
 * compose the prefix (a later group counts past the miss) and end the
 * leases granted past it. */
static void testBatchExists(mc_client *c) {
    char names[BX_N][24];
    mc_key keys[BX_N];
    int res[BX_N], m = -1, later = -1;
    for (int i = 0; i < BX_N; i++) {
        snprintf(names[i], sizeof(names[i]), "cl:bx:%d", i);
        keys[i] = (mc_key){names[i], strlen(names[i])};
    }
    /* The miss: the first key on another node than key 0's, so groups
     * before it are answered too; some key after it in another slot. */
    for (int i = 1; i < BX_N && m < 0; i++)
        if (ownerOf(names[i]) != ownerOf(names[0])) m = i;
    for (int j = m + 1; m > 0 && j < BX_N && later < 0; j++)
        if (keySlot(names[j]) != keySlot(names[m])) later = j;
    TEST("exists: mc_batch_exists over 3 nodes, per key, in order") {
        CHECK(c && m > 0 && later > m);
        for (int i = 0; c && i < BX_N; i++)
            if (i != m) CHECK_EQ(putKey(c, names[i], 100 + (size_t)i, NULL), MC_OK);
        CHECK_EQ(mc_batch_exists(c, BX_N, keys, 0, res), BX_N - 1);
        for (int i = 0; i < BX_N; i++) CHECK_EQ(res[i], i != m);
    }
    TEST("exists: PREFIX over slot groups is the first miss in the caller's order; leases past it end") {
        CHECK_EQ(mc_batch_exists(c, BX_N, keys, MC_EXISTS_PREFIX | MC_EXISTS_LEASE, res), m);
        for (int i = 0; i < BX_N; i++) CHECK_EQ(res[i], i < m);
        for (int i = 0; i < m; i++) CHECK(leaseOn(ownerOf(names[i]), names[i]) > 0);
        /* Found by its group, not part of the answer: released, not left to lease-ttl. */
        int ended = 0;
        for (int t = 0; t < 200 && !ended; t++) {
            ended = leaseOn(ownerOf(names[later]), names[later]) == 0;
            if (!ended) usleep(10000);
        }
        CHECK(ended);
        CHECK_EQ(mc_batch_exists(c, BX_N - m - 1, keys + m + 1, MC_EXISTS_PREFIX, res), BX_N - m - 1);
        CHECK_EQ(mc_batch_exists(c, 1, keys + m, MC_EXISTS_PREFIX, res), 0);
    }
}

static void testExistsRemove(void) {
    mc_client *c = mcOpen(node[2].tcp_uri, MC_TRANSPORT_AUTO);
    TEST("exists/remove: on a key of every node: exists 1, remove 1, then exists 0, get NOT_FOUND, remove 0") {
        CHECK(c != NULL);
        int done[NNODES] = {0};
        for (int i = 0; c && i < 64; i++) {
            char key[32];
            snprintf(key, sizeof(key), "cl:er:%d", i);
            int o = ownerOf(key);
            if (o < 0 || done[o]) continue;
            done[o] = 1;
            CHECK_EQ(putKey(c, key, 777, NULL), MC_OK);
            CHECK_EQ(mc_exists(c, key, strlen(key)), 1);
            CHECK_EQ(mc_size(c, key, strlen(key)), 777);
            CHECK_EQ(mc_remove(c, key, strlen(key)), 1);
            CHECK_EQ(mc_exists(c, key, strlen(key)), 0);
            char b[8];
            CHECK_EQ(mc_get(c, key, strlen(key), b, sizeof(b)), MC_ERR_NOT_FOUND);
            CHECK_EQ(mc_size(c, key, strlen(key)), MC_ERR_NOT_FOUND);
            CHECK_EQ(mc_remove(c, key, strlen(key)), 0);
            CHECK_EQ(rawExists(o, key), 0);
        }
        for (int i = 0; i < NNODES; i++) CHECK(done[i]);
    }
    testBatchExists(c);
    TEST("exists/remove: mc_remove_all removes the keys of every primary and returns their sum") {
        long long keys = 0;
        for (int i = 0; i < NNODES; i++) {
            redisReply *r = rcmd(i, "DBSIZE");
            keys += replyInt(r);
            freeReplyObject(r);
        }
        CHECK(keys > 0);
        CHECK_EQ(mc_remove_all(c), keys);
        for (int i = 0; i < NNODES; i++) {
            redisReply *r = rcmd(i, "DBSIZE");
            CHECK_EQ(replyInt(r), 0);
            freeReplyObject(r);
        }
        CHECK_EQ(mc_remove_all(c), 0);
    }
    mcClose(&c);
}

/* ==== 4. a hosted segment sliced over the primaries ==================================== */

#define MT_N 24
static const size_t mt_sizes[] = {1, 4096, 100 * KiB, 2 * MiB};

static void mtKey(char *key, size_t cap, int round, int i) { snprintf(key, cap, "cl:mt%d:%d", round, i); }
static size_t mtSize(int i) { return mt_sizes[i % 4]; }

static void testMount(void) {
    char tail[96];
    snprintf(tail, sizeof(tail), ":%d:clhost", (int)getpid());
    long long ids[NNODES] = {0};
    mc_client *h = mcOpen(node[0].unix_uri, MC_TRANSPORT_AUTO);
    TEST("mount: mc_mount of 48 MiB through node 1 mounts a 16 MiB slice on every primary, owned by this process") {
        CHECK(h != NULL);
        int rc = h ? mc_mount(h, 48 * MiB, "clhost") : -1;
        CHECK_EQ(rc, MC_OK);
        if (rc != MC_OK && h) fprintf(stderr, "    (%s)\n", mc_last_error(h));
        for (int i = 0; i < NNODES; i++) {
            long long size = 0;
            ids[i] = segmentNamed(i, "clhost", tail, &size);
            CHECK(ids[i] > 0);
            CHECK_EQ(size, (long long)(16 * MiB));
        }
        CHECK(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
        CHECK_EQ(h ? mc_mount_id(h) : 0, ids[0]);
    }
    mc_client *w = mcOpen(node[1].tcp_uri, MC_TRANSPORT_AUTO);
    mc_put_opts o = {.replicas = 1, .prefer = "clhost"};
    int first_off0[NNODES] = {0};
    TEST("mount: puts preferring it land in the slice on each key's owner (GET.REPLICAS there)") {
        int per[NNODES] = {0};
        for (int i = 0; i < MT_N; i++) {
            char key[32];
            mtKey(key, sizeof(key), 0, i);
            CHECK_EQ(putKey(w, key, mtSize(i), &o), MC_OK);
            int own = ownerOf(key);
            CHECK(own >= 0);
            if (own < 0) continue;
            long long off = -1, seg = firstReplica(own, key, &off);
            if (seg != ids[own]) fprintf(stderr, "  %s on node %d: segment %lld, not the slice %lld\n", key, own + 1, seg, ids[own]);
            CHECK_EQ(seg, ids[own]);
            if (per[own]++ == 0 && off == 0) first_off0[own] = 1;
        }
        for (int i = 0; i < NNODES; i++) CHECK(per[i] > 0);
    }
    TEST("mount: the first value of each slice is at offset 0 of its slice (so overlapping slices would clash)") {
        for (int i = 0; i < NNODES; i++) CHECK(first_off0[i]);
    }
    mc_client *r = mcOpen(node[2].unix_uri, MC_TRANSPORT_SHM);
    TEST("mount: another handle reads every value over shm, byte for byte") {
        for (int i = 0; i < MT_N; i++) {
            char key[32];
            mtKey(key, sizeof(key), 0, i);
            CHECK(getKey(r, key, mtSize(i), MC_TRANSPORT_SHM));
        }
    }
    TEST("mount: and over tcp (the writer's handle, forced), byte for byte") {
        if (w) mc_set_transport(w, MC_TRANSPORT_TCP);
        for (int i = 0; i < MT_N; i++) {
            char key[32];
            mtKey(key, sizeof(key), 0, i);
            CHECK(getKey(w, key, mtSize(i), MC_TRANSPORT_TCP));
        }
        if (w) mc_set_transport(w, MC_TRANSPORT_AUTO);
    }
    TEST("mount: the hosting handle reads them too") {
        for (int i = 0; i < MT_N; i += 3) {
            char key[32];
            mtKey(key, sizeof(key), 0, i);
            CHECK(getKey(h, key, mtSize(i), MC_TRANSPORT_AUTO));
        }
    }
    TEST("mount: the hosting handle's own puts, on every shard, land in its own slices and read back") {
        int per[NNODES] = {0};
        for (int i = 0; i < 64; i++) {
            char key[32];
            mtKey(key, sizeof(key), 2, i);
            int own = ownerOf(key);
            if (own < 0 || per[own] >= 2) continue;
            per[own]++;
            CHECK_EQ(putKey(h, key, 300 * KiB + (size_t)i, &o), MC_OK);
            CHECK_EQ(firstReplica(own, key, NULL), ids[own]);
            CHECK(getKey(r, key, 300 * KiB + (size_t)i, MC_TRANSPORT_SHM));
        }
        for (int i = 0; i < NNODES; i++) CHECK_EQ(per[i], 2);
    }
    /* Node 3 lets the owner go: owner-ttl 0 and every connection cut, then
     * more than one heartbeat. Usually the owner is reaped before the next
     * beat (-NEEDREMOUNT: a new id); either way the slice must be mounted
     * there and serve. */
    TEST("mount: node 3 drops the owner; the heartbeat mounts the slice again there and it takes puts") {
        long long old = ids[2];
        CHECK(rOk(2, "CONFIG SET owner-ttl 0"));
        redisReply *k = rcmd(2, "CLIENT KILL TYPE normal SKIPME yes");
        CHECK(replyInt(k) >= 1);
        freeReplyObject(k);
        tsSleepMs(2500);
        long long now_id = segmentNamed(2, "clhost", tail, NULL);
        CHECK(now_id > 0);
        if (tsLogHas(&node[2], "is gone: unmounting segment 'clhost'")) CHECK(now_id != old);
        else fprintf(stderr, "  (node 3 did not reap the owner before the beat: same id kept)\n");
        CHECK(rOk(2, "CONFIG SET owner-ttl 10000"));
        int tried = 0;
        for (int i = 0; i < 64 && tried < 3; i++) {
            char key[32];
            mtKey(key, sizeof(key), 1, i);
            if (ownerOf(key) != 2) continue;
            tried++;
            CHECK_EQ(putKey(w, key, 5000, &o), MC_OK);
            CHECK_EQ(firstReplica(2, key, NULL), now_id);
            CHECK(getKey(r, key, 5000, MC_TRANSPORT_SHM));
        }
        CHECK_EQ(tried, 3);
    }
    TEST("mount: mc_close unmounts the slice on every node") {
        mcClose(&h);
        for (int i = 0; i < NNODES; i++) CHECK_EQ(segmentNamed(i, "clhost", tail, NULL), 0);
    }
    mcClose(&r);
    mcClose(&w);
}

/* ==== 5. a slot migrated while a handle is connected ===================================== */

#define MG_N 12

static void mgKey(char *key, size_t cap, int i) { snprintf(key, cap, "{cl:mig}:%d", i); }
static size_t mgSize(int i) { return i % 3 == 0 ? 1 * MiB + (size_t)i : 3000 + (size_t)i; }

static int migrateKeys(int src, int dst, int from, int to) {
    const char *argv[8 + MG_N];
    size_t lens[8 + MG_N];
    static char keys[MG_N][32];
    char port[16];
    snprintf(port, sizeof(port), "%d", node[dst].port);
    int argc = 0;
    const char *fixed[] = {"MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS"};
    for (int i = 0; i < 7; i++) argv[argc++] = fixed[i];
    for (int i = from; i < to; i++) {
        mgKey(keys[i], sizeof(keys[i]), i);
        argv[argc++] = keys[i];
    }
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    redisContext *c = rNode(src);
    redisReply *r = c ? redisCommandArgv(c, argc, argv, lens) : NULL;
    int ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK");
    if (!ok) showReply("MIGRATE", r);
    freeReplyObject(r);
    return ok;
}

static void testMigrate(void) {
    char key[32];
    mgKey(key, sizeof(key), 0);
    int slot = keySlot(key), src = slotOwner(slot);
    int dst = (src + 1) % NNODES, other = (src + 2) % NNODES;
    /* The handle talks to a node that is neither source nor target. */
    mc_client *c = mcOpen(node[other].tcp_uri, MC_TRANSPORT_AUTO);
    TEST("migrate: values in one slot are put and read with the map as it is") {
        CHECK(c != NULL && src >= 0);
        for (int i = 0; i < MG_N; i++) {
            mgKey(key, sizeof(key), i);
            CHECK_EQ(putKey(c, key, mgSize(i), NULL), MC_OK);
            CHECK(getKey(c, key, mgSize(i), MC_TRANSPORT_AUTO));
        }
    }
    if (src < 0) return;
    TEST("migrate: SETSLOT IMPORTING on the target and MIGRATING on the source (hiredis)") {
        CHECK(rOk(dst, "CLUSTER SETSLOT %d IMPORTING %s", slot, node_id[src]));
        CHECK(rOk(src, "CLUSTER SETSLOT %d MIGRATING %s", slot, node_id[dst]));
    }
    TEST("migrate: half the keys MIGRATEd; reads follow -ASK for those, the source serves the rest, all byte-exact") {
        CHECK(migrateKeys(src, dst, 0, MG_N / 2));
        for (int i = 0; i < MG_N; i++) {
            mgKey(key, sizeof(key), i);
            /* The source has the rest; for the moved ones it answers -ASK. */
            CHECK_EQ(rawExists(src, key), i < MG_N / 2 ? -1 : 1);
            CHECK(getKey(c, key, mgSize(i), MC_TRANSPORT_AUTO));
        }
    }
    TEST("migrate: a batch get over the half-moved slot (-TRYAGAIN, then -ASK) is byte-exact and in order") {
        mc_kv items[MG_N];
        long long res[MG_N];
        static char keys[MG_N][32];
        char *bufs[MG_N];
        for (int i = 0; i < MG_N; i++) {
            mgKey(keys[i], sizeof(keys[i]), i);
            bufs[i] = xmalloc(mgSize(i));
            items[i] = (mc_kv){keys[i], strlen(keys[i]), bufs[i], mgSize(i)};
        }
        CHECK_EQ(c ? mc_batch_get(c, MG_N, items, res) : -1, MG_N);
        for (int i = 0; i < MG_N; i++) {
            char *want = xmalloc(mgSize(i));
            fillFor(want, mgSize(i), keys[i]);
            CHECK(sameBytes(keys[i], bufs[i], res[i], want, mgSize(i)));
            free(want);
            free(bufs[i]);
        }
    }
    TEST("migrate: a new key in the migrating slot is put on the target: PUT.START and PUT.END there once (ASKING)") {
        resetStats();
        mgKey(key, sizeof(key), 100);
        CHECK_EQ(putKey(c, key, 70000, NULL), MC_OK);
        CHECK_EQ(cmdCalls(dst, "put.start"), 1);
        CHECK_EQ(cmdCalls(dst, "put.end"), 1);
        CHECK_EQ(cmdCalls(dst, "asking"), 2);
        CHECK_EQ(rawExists(src, key), -1); /* not there: the source asks elsewhere */
        CHECK(getKey(c, key, 70000, MC_TRANSPORT_AUTO));
    }
    TEST("migrate: a batch put of new keys in the migrating slot lands on the target") {
        mc_kv items[4];
        int res[4];
        static char keys[4][32];
        char *vals[4];
        for (int i = 0; i < 4; i++) {
            mgKey(keys[i], sizeof(keys[i]), 200 + i);
            vals[i] = xmalloc(5000);
            fillFor(vals[i], 5000, keys[i]);
            items[i] = (mc_kv){keys[i], strlen(keys[i]), vals[i], 5000};
        }
        CHECK_EQ(c ? mc_batch_put(c, 4, items, NULL, res) : -1, 4);
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(res[i], MC_OK);
            CHECK(getKey(c, keys[i], 5000, MC_TRANSPORT_AUTO));
            free(vals[i]);
        }
    }
    TEST("migrate: the rest MIGRATEd and SETSLOT NODE on every node; the handle follows -MOVED, every value byte-exact") {
        CHECK(migrateKeys(src, dst, MG_N / 2, MG_N));
        CHECK(rOk(dst, "CLUSTER SETSLOT %d NODE %s", slot, node_id[dst]));
        CHECK(rOk(src, "CLUSTER SETSLOT %d NODE %s", slot, node_id[dst]));
        CHECK(rOk(other, "CLUSTER SETSLOT %d NODE %s", slot, node_id[dst]));
        int moved = 0;
        for (long long deadline = tsNowMs() + 5000; !moved && tsNowMs() < deadline; tsSleepMs(20))
            moved = slotOwner(slot) == dst && rawExists(src, key) == -1;
        CHECK(moved);
        for (int i = 0; i < MG_N; i++) {
            mgKey(key, sizeof(key), i);
            CHECK(getKey(c, key, mgSize(i), MC_TRANSPORT_AUTO));
            CHECK_EQ(rawExists(dst, key), 1);
        }
    }
    TEST("migrate: the next reads of the slot go straight to the new owner (the old one sees none)") {
        resetStats();
        for (int i = 0; i < MG_N; i++) {
            mgKey(key, sizeof(key), i);
            CHECK(getKey(c, key, mgSize(i), MC_TRANSPORT_AUTO));
        }
        CHECK_EQ(cmdCalls(src, "get.replicas"), 0);
        CHECK_EQ(cmdCalls(dst, "get.replicas"), MG_N);
    }
    mcClose(&c);
}

/* ==== 6. a slot that moves between PUT.START and PUT.END ===================================== */

/* A segment host of the test's own: SEG.WRITE/SEG.READ into memory per
 * segment id, and a hook run (before answering) at the first write into
 * one of them. */
typedef struct fakeHost {
    int lfd, port;
    pthread_t thread;
    volatile int stop;
    long long ids[2];
    char *mem[2];
    size_t size;
    int writes[2];
    long long hook_id;
    int hooked;
    void (*hook)(void);
} fakeHost;

static fakeHost fh;

static int fhReadLine(int fd, char *buf, size_t cap) {
    size_t n = 0;
    while (n + 1 < cap) {
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r <= 0) return -1;
        if (ch == '\n') {
            if (n && buf[n - 1] == '\r') n--;
            buf[n] = '\0';
            return 0;
        }
        buf[n++] = ch;
    }
    return -1;
}

static int fhReadN(int fd, char *p, size_t n) {
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void *fhConn(void *arg) {
    int fd = (int)(intptr_t)arg;
    char line[128];
    char *argv[8] = {0};
    size_t lens[8];
    while (fhReadLine(fd, line, sizeof(line)) == 0) {
        int argc = atoi(line + 1);
        if (line[0] != '*' || argc < 1 || argc > 8) break;
        int bad = 0;
        for (int i = 0; i < argc && !bad; i++) {
            if (fhReadLine(fd, line, sizeof(line)) != 0 || line[0] != '$') bad = 1;
            else {
                lens[i] = (size_t)atoll(line + 1);
                argv[i] = malloc(lens[i] + 3);
                bad = !argv[i] || fhReadN(fd, argv[i], lens[i] + 2) != 0;
                if (!bad) argv[i][lens[i]] = '\0';
            }
        }
        if (bad) break;
        const char *reply = "-ERR unknown command for the test's host\r\n";
        long long id = argc >= 2 ? atoll(argv[1]) : 0;
        int which = id == fh.ids[0] ? 0 : id == fh.ids[1] ? 1 : -1;
        size_t off = argc >= 3 ? (size_t)atoll(argv[2]) : 0;
        if (!strcasecmp(argv[0], "PING")) reply = "+PONG\r\n";
        else if (!strcasecmp(argv[0], "SEG.WRITE") && argc == 4 && which >= 0 && off + lens[3] <= fh.size) {
            if (id == fh.hook_id && !fh.hooked++ && fh.hook) fh.hook();
            memcpy(fh.mem[which] + off, argv[3], lens[3]);
            __atomic_add_fetch(&fh.writes[which], 1, __ATOMIC_SEQ_CST);
            reply = "+OK\r\n";
        } else if (!strcasecmp(argv[0], "SEG.READ") && argc == 4 && which >= 0) {
            size_t n = (size_t)atoll(argv[3]);
            if (off + n <= fh.size) {
                char hdr[32];
                int hl = snprintf(hdr, sizeof(hdr), "$%zu\r\n", n);
                if (tsWriteAll(fd, hdr, (size_t)hl) || tsWriteAll(fd, fh.mem[which] + off, n) || tsWriteAll(fd, "\r\n", 2))
                    break;
                reply = NULL;
            }
        }
        for (int i = 0; i < argc; i++) {
            free(argv[i]);
            argv[i] = NULL;
        }
        if (reply && tsWriteAll(fd, reply, strlen(reply))) break;
    }
    for (int i = 0; i < 8; i++) free(argv[i]);
    close(fd);
    return NULL;
}

static void *fhMain(void *arg) {
    (void)arg;
    while (!fh.stop) {
        struct pollfd p = {fh.lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        int fd = accept(fh.lfd, NULL, NULL);
        if (fd < 0) continue;
        pthread_t t;
        if (pthread_create(&t, NULL, fhConn, (void *)(intptr_t)fd) == 0) pthread_detach(t);
        else close(fd);
    }
    return NULL;
}

static int fhStart(size_t size) {
    memset(&fh, 0, sizeof(fh));
    fh.size = size;
    fh.mem[0] = calloc(1, size);
    fh.mem[1] = calloc(1, size);
    fh.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!fh.mem[0] || !fh.mem[1] || fh.lfd < 0 || bind(fh.lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(fh.lfd, 16) != 0 || getsockname(fh.lfd, (struct sockaddr *)&sa, &len) != 0)
        return -1;
    fh.port = ntohs(sa.sin_port);
    return pthread_create(&fh.thread, NULL, fhMain, NULL);
}

static void fhStop(void) {
    fh.stop = 1;
    pthread_join(fh.thread, NULL);
    close(fh.lfd);
    free(fh.mem[0]);
    free(fh.mem[1]);
}

/* The move the hook makes: slot pm_slot from pm_src to pm_dst, on
 * connections of its own, then waits until the source redirects. With
 * pm_open_only it only opens the slot (IMPORTING, MIGRATING): the put ends
 * while the slot migrates. */
static int pm_slot, pm_src, pm_dst, pm_ok, pm_open_only;
static char pm_key[64];

static void pmMoveSlot(void) {
    redisContext *c[NNODES];
    struct timeval tv = {5, 0};
    pm_ok = 1;
    for (int i = 0; i < NNODES; i++) {
        c[i] = redisConnectWithTimeout("127.0.0.1", node[i].port, tv);
        if (!c[i] || c[i]->err) pm_ok = 0;
    }
    char s[16];
    snprintf(s, sizeof(s), "%d", pm_slot);
    int order[5] = {pm_dst, pm_src, pm_dst, pm_src, 3 - pm_src - pm_dst};
    const char *words[5] = {"IMPORTING", "MIGRATING", "NODE", "NODE", "NODE"};
    const char *ids[5] = {node_id[pm_src], node_id[pm_dst], node_id[pm_dst], node_id[pm_dst], node_id[pm_dst]};
    for (int k = 0; k < (pm_open_only ? 2 : 5) && pm_ok; k++) {
        redisReply *r = redisCommand(c[order[k]], "CLUSTER SETSLOT %s %s %s", s, words[k], ids[k]);
        if (!r || r->type != REDIS_REPLY_STATUS) {
            showReply("hook: CLUSTER SETSLOT", r);
            pm_ok = 0;
        }
        freeReplyObject(r);
    }
    /* The source gave the slot away once it redirects the key. */
    int redirected = pm_open_only;
    for (long long deadline = tsNowMs() + 5000; pm_ok && !redirected && tsNowMs() < deadline; tsSleepMs(10)) {
        redisReply *r = redisCommand(c[pm_src], "EXISTS %s", pm_key);
        redirected = r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "MOVED", 5);
        freeReplyObject(r);
    }
    pm_ok = pm_ok && redirected;
    for (int i = 0; i < NNODES; i++)
        if (c[i]) redisFree(c[i]);
}

static long long countKeysInSlot(int i, int slot) {
    redisReply *r = rcmd(i, "CLUSTER COUNTKEYSINSLOT %d", slot);
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

static void testPutMoved(void) {
    /* A key whose slot has no other keys. */
    snprintf(pm_key, sizeof(pm_key), "{cl:pm:%d}", (int)getpid());
    pm_slot = keySlot(pm_key);
    pm_src = slotOwner(pm_slot);
    pm_dst = (pm_src + 1) % NNODES;
    int host0 = pm_src, host1 = pm_dst; /* the nodes 'mid' is mounted on as ids[0] and ids[1] */
    int client_node = (pm_src + 2) % NNODES;
    long long owner_ok = 0;
    TEST("put-moved: a test segment host named 'mid' is mounted on the source and on the target") {
        CHECK(pm_src >= 0);
        CHECK(fhStart(4 * MiB) == 0);
        char ep[64];
        snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", fh.port);
        for (int k = 0; k < 2 && pm_src >= 0; k++) {
            redisReply *r = rcmd(k ? pm_dst : pm_src, "MOUNT mid 4mb ENDPOINT %s OWNER cltest-mid", ep);
            fh.ids[k] = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
            if (!fh.ids[k]) showReply("MOUNT mid", r);
            freeReplyObject(r);
            CHECK(fh.ids[k] > 0);
        }
        owner_ok = fh.ids[0] > 0 && fh.ids[1] > 0;
    }
    if (!owner_ok) return;
    fh.hook_id = fh.ids[0];
    fh.hook = pmMoveSlot;
    mc_client *c = mcOpen(node[client_node].tcp_uri, MC_TRANSPORT_AUTO);
    mc_put_opts o = {.replicas = 1, .prefer = "mid"};
    TEST("put-moved: the slot moves while the source's replica is written; the put is redone on the new owner") {
        CHECK_EQ(putKey(c, pm_key, 100 * KiB, &o), MC_OK);
        CHECK(pm_ok); /* the hook did move the slot in the middle */
        CHECK_EQ(fh.writes[0], 1);
        CHECK_EQ(fh.writes[1], 1);
        CHECK_EQ(firstReplica(pm_dst, pm_key, NULL), fh.ids[1]);
        CHECK_EQ(rawExists(pm_dst, pm_key), 1);
        CHECK_EQ(rawExists(pm_src, pm_key), -1); /* MOVED */
    }
    TEST("put-moved: the value reads back byte for byte (from the target's segment)") {
        CHECK(getKey(c, pm_key, 100 * KiB, MC_TRANSPORT_TCP));
        char *want = xmalloc(100 * KiB);
        fillFor(want, 100 * KiB, pm_key);
        long long off = -1;
        firstReplica(pm_dst, pm_key, &off);
        CHECK(off >= 0 && memcmp(fh.mem[1] + off, want, 100 * KiB) == 0);
        free(want);
    }
    mc_remove(c, pm_key, strlen(pm_key));
    /* The same for a batch, the other way round: a slot of the target
     * (holding 'mid' as ids[1]) moves to the source (ids[0]) while the
     * first value is written; values of 100 KiB go as one SEG.WRITE each. */
    TEST("put-moved: a batch whose slot moves before BATCH.PUT.END is redone on the new owner, results in order") {
        enum { NB = 3 };
        static char keys[NB][48];
        int old_owner = pm_dst, new_owner = pm_src, found = 0;
        for (int t = 0; t < 64 && !found; t++) {
            for (int k = 0; k < NB; k++) snprintf(keys[k], sizeof(keys[k]), "{cl:pmb:%d:%d}:%d", (int)getpid(), t, k);
            found = ownerOf(keys[0]) == old_owner;
        }
        CHECK(found);
        snprintf(pm_key, sizeof(pm_key), "%s", keys[0]);
        pm_slot = keySlot(keys[0]);
        pm_src = old_owner;
        pm_dst = new_owner;
        pm_ok = 0;
        fh.hooked = 0;
        fh.hook_id = fh.ids[1];
        fh.writes[0] = fh.writes[1] = 0;
        mc_kv items[NB];
        int res[NB];
        char *vals[NB];
        for (int k = 0; k < NB; k++) {
            vals[k] = xmalloc(100 * KiB);
            fillFor(vals[k], 100 * KiB, keys[k]);
            items[k] = (mc_kv){keys[k], strlen(keys[k]), vals[k], 100 * KiB};
        }
        CHECK_EQ(c && found ? mc_batch_put(c, NB, items, &o, res) : -1, NB);
        CHECK(pm_ok);
        CHECK_EQ(fh.writes[1], NB); /* the first time, on the old owner's 'mid' */
        CHECK_EQ(fh.writes[0], NB); /* redone on the new owner's */
        for (int k = 0; k < NB; k++) {
            CHECK_EQ(res[k], MC_OK);
            CHECK_EQ(firstReplica(new_owner, keys[k], NULL), fh.ids[0]);
            CHECK(getKey(c, keys[k], 100 * KiB, MC_TRANSPORT_TCP));
            mc_remove(c, keys[k], strlen(keys[k]));
            free(vals[k]);
        }
    }
    /* Found probing a reshard under load: a put started before its slot
     * was set MIGRATING was published on the source after the key loop had
     * found the slot empty, and SETSLOT NODE on the target (first, as
     * redis-cli does it) then gave the slot away with the key left behind.
     * Now the source answers that PUT.END with -ASK and drops the put; the
     * library redoes it on the target behind ASKING. */
    TEST("put-moved: the slot starts migrating while the source's replica is written; -ASK to PUT.END redoes it on the target") {
        int found = 0;
        for (int t = 0; t < 256 && !found; t++) {
            snprintf(pm_key, sizeof(pm_key), "{cl:pma:%d:%d}", (int)getpid(), t);
            found = ownerOf(pm_key) == host0 && countKeysInSlot(host0, keySlot(pm_key)) == 0;
        }
        CHECK(found);
        pm_slot = keySlot(pm_key);
        pm_src = host0;
        pm_dst = host1;
        pm_ok = 0;
        pm_open_only = 1;
        fh.hooked = 0;
        fh.hook_id = fh.ids[0];
        fh.writes[0] = fh.writes[1] = 0;
        CHECK_EQ(c && found ? putKey(c, pm_key, 100 * KiB, &o) : -1, MC_OK);
        pm_open_only = 0;
        CHECK(pm_ok);
        CHECK_EQ(fh.writes[0], 1); /* the source's, never published */
        CHECK_EQ(fh.writes[1], 1); /* redone on the target's */
        CHECK_EQ(countKeysInSlot(host0, pm_slot), 0);
        CHECK_EQ(infoStoreField(host0, "store_puts_pending"), 0);
        /* The move ends as redis-cli ends it: the target first. */
        CHECK(rOk(host1, "CLUSTER SETSLOT %d NODE %s", pm_slot, node_id[host1]));
        CHECK(rOk(host0, "CLUSTER SETSLOT %d NODE %s", pm_slot, node_id[host1]));
        CHECK(rOk(3 - host0 - host1, "CLUSTER SETSLOT %d NODE %s", pm_slot, node_id[host1]));
        int moved = 0;
        for (long long deadline = tsNowMs() + 5000; !moved && tsNowMs() < deadline; tsSleepMs(10))
            moved = rawExists(host0, pm_key) == -1;
        CHECK(moved);
        CHECK_EQ(rawExists(host1, pm_key), 1);
        CHECK_EQ(firstReplica(host1, pm_key, NULL), fh.ids[1]);
        CHECK(getKey(c, pm_key, 100 * KiB, MC_TRANSPORT_TCP));
        mc_remove(c, pm_key, strlen(pm_key));
    }
    mcClose(&c);
    for (int k = 0; k < 2; k++) {
        redisReply *r = rcmd(k ? pm_dst : pm_src, "UNMOUNT mid");
        freeReplyObject(r);
    }
    fhStop();
}

/* ==== 7. mooncake-cli ================================================================== */

static const char *cliBinary(void) {
    static char path[PATH_MAX + 64];
    static const char *const env[] = {"MC_CLI"};
    return tsFindBinary("mooncake-cli", env, 1, path, sizeof(path));
}

static void testCli(void) {
    const char *cli = cliBinary();
    char dir[96] = "";
    TEST("cli: mooncake-cli puts through node 1, gets through node 3's socket, ls and rm through node 2") {
        CHECK(cli != NULL);
        CHECK(testMkdtemp(dir, sizeof(dir), "mccli") == 0);
        if (!cli) break;
        char log[128], in[128], out[128], p1[16], p2[16];
        snprintf(log, sizeof(log), "%s/cli.log", dir);
        snprintf(p1, sizeof(p1), "%d", node[0].port);
        snprintf(p2, sizeof(p2), "%d", node[1].port);
        int per[NNODES] = {0}, nkeys = 0;
        char keys[8][32];
        for (int i = 0; i < 64 && nkeys < 6; i++) {
            snprintf(keys[nkeys], sizeof(keys[nkeys]), "cl:cli:%d", i);
            int o = ownerOf(keys[nkeys]);
            if (o < 0 || per[o] >= 2) continue;
            per[o]++;
            size_t n = 1000 + 37 * (size_t)i;
            char *buf = xmalloc(n);
            fillFor(buf, n, keys[nkeys]);
            snprintf(in, sizeof(in), "%s/in%d", dir, nkeys);
            FILE *f = fopen(in, "w");
            CHECK(f && fwrite(buf, 1, n, f) == n);
            if (f) fclose(f);
            const char *put[] = {cli, "-p", p1, "put", keys[nkeys], in, NULL};
            CHECK_EQ(runProgram(put, log, 10000), 0);
            snprintf(out, sizeof(out), "%s/out%d", dir, nkeys);
            const char *get[] = {cli, "-s", node[2].sock, "get", keys[nkeys], out, NULL};
            CHECK_EQ(runProgram(get, log, 10000), 0);
            f = fopen(out, "r");
            char *back = xmalloc(n + 1);
            size_t got = f ? fread(back, 1, n + 1, f) : 0;
            if (f) fclose(f);
            CHECK(sameBytes(keys[nkeys], back, (long long)got, buf, n));
            free(back);
            free(buf);
            nkeys++;
        }
        CHECK_EQ(nkeys, 6);
        /* ls: stdout to a file of its own. */
        char lsout[128];
        snprintf(lsout, sizeof(lsout), "%s/ls.out", dir);
        const char *ls[] = {cli, "-p", p2, "ls", "cl:cli:*", NULL};
        CHECK_EQ(runProgram(ls, lsout, 10000), 0);
        FILE *f = fopen(lsout, "r");
        int lines = 0;
        char line[256];
        while (f && fgets(line, sizeof(line), f)) lines += !strncmp(line, "cl:cli:", 7) && strchr(line, '\t') != NULL;
        if (f) fclose(f);
        if (lines != nkeys) showFile(lsout, 20);
        CHECK_EQ(lines, nkeys);
        char rmout[128];
        snprintf(rmout, sizeof(rmout), "%s/rm.out", dir);
        const char *rm[] = {cli, "-p", p2, "rm", keys[0], keys[1], keys[2], keys[3], keys[4], keys[5], NULL};
        CHECK_EQ(runProgram(rm, rmout, 10000), 0);
        f = fopen(rmout, "r");
        CHECK(f && fgets(line, sizeof(line), f) && atoi(line) == 6);
        if (f) fclose(f);
        for (int i = 0; i < nkeys; i++) CHECK_EQ(rawExists(ownerOf(keys[i]), keys[i]), 0);
        if (test_cur_failed) showFile(log, 30);
    }
    rmTree(dir);
}

/* ==== 8. a server without cluster support ================================================= */

static void testSingleNode(void) {
    const char *group = "single-node";
    tsServer s;
    int failed0 = test_failed;
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    TEST("single-node: the handle sends what it always did: one CLUSTER probe, no ASKING, one command per step") {
        struct timeval tv = {5, 0};
        redisContext *r = redisConnectWithTimeout("127.0.0.1", s.port, tv);
        redisReply *st = r && !r->err ? redisCommand(r, "CONFIG RESETSTAT") : NULL; /* tsStart's PINGs */
        freeReplyObject(st);
        mc_client *c = mcOpen(s.unix_uri, MC_TRANSPORT_AUTO);
        CHECK(c != NULL);
        CHECK_EQ(putKey(c, "sn:k", 5000, NULL), MC_OK);
        CHECK(getKey(c, "sn:k", 5000, MC_TRANSPORT_SHM));
        mc_kv it[2] = {{"sn:a", 4, "xx", 2}, {"sn:b", 4, "yyy", 3}};
        int res[2];
        CHECK_EQ(c ? mc_batch_put(c, 2, it, NULL, res) : -1, 2);
        mcClose(&c);
        st = r && !r->err ? redisCommand(r, "INFO commandstats") : NULL;
        const char *t = st && st->type == REDIS_REPLY_STRING ? st->str : "";
        CHECK(strstr(t, "cmdstat_cluster|slots:calls=1,") != NULL);
        CHECK(strstr(t, "cmdstat_asking") == NULL);
        CHECK(strstr(t, "cmdstat_ping") == NULL);
        CHECK(strstr(t, "cmdstat_cluster|myid") == NULL);
        CHECK(strstr(t, "cmdstat_put.start:calls=1,") != NULL);
        CHECK(strstr(t, "cmdstat_put.end:calls=1,") != NULL);
        CHECK(strstr(t, "cmdstat_batch.put.start:calls=1,") != NULL);
        CHECK(strstr(t, "cmdstat_batch.put.end:calls=1,") != NULL);
        CHECK(strstr(t, "cmdstat_get.replicas:calls=1,") != NULL);
        freeReplyObject(st);
        if (r) redisFree(r);
    }
    tsGroupFinish(&s, group, failed0);
}

/* ==== main ============================================================================ */

static const struct {
    const char *name;
    void (*fn)(void);
} groups[] = {
    {"routing", testRouting}, {"batch", testBatch},     {"exists", testExistsRemove}, {"mount", testMount},
    {"migrate", testMigrate}, {"put-moved", testPutMoved}, {"cli", testCli},
};

int main(int argc, char **argv) {
    const char *only = groupMainStart("test_mooncake_cluster", MC_VERSION, SIG_IGN, argc, argv);
    watchdog();
    int failed0 = test_failed;
    clusterStart();
    if (skip_reason) {
        printf("SKIP: %s\n", skip_reason);
        clusterStop(failed0);
        alarm(0);
        printf("0 passed, 0 failed\n");
        return 0;
    }
    for (size_t i = 0; cluster_up && i < sizeof(groups) / sizeof(groups[0]); i++) {
        if (only && !strstr(groups[i].name, only)) continue;
        watchdog();
        groups[i].fn();
    }
    watchdog();
    clusterStop(failed0);
    if (!only || strstr("single-node", only)) {
        watchdog();
        testSingleNode();
    }
    alarm(0);
    return testReport();
}
