/* mc_route.c -- which node answers a command, and riding through a lost one.
 *
 * mc_connect sends CLUSTER SLOTS where it used to send PING (the same one
 * round trip): a server without cluster support answers an error and the
 * handle is the single-node client it always was -- one metadata
 * connection, node 0, no slot hashing, the exact same commands. A cluster
 * node answers the slot map, and from then on (mc_cluster.c holds the map):
 *  - keyed commands go to the owner of the key's slot (mcKeyCommand), on a
 *    connection per node opened on first use with the handle's password;
 *    -MOVED patches that slot and refreshes the whole map (at most every
 *    MC_MAP_REFRESH_MS), -ASK resends to the target behind ASKING (good for
 *    one command), -TRYAGAIN waits a little, -CLUSTERDOWN refreshes the map
 *    and waits; all bounded by the I/O timeout (see riding through).
 *  - a put's PUT.END (and PUT.REVOKE) go to the node that answered its
 *    PUT.START, behind ASKING if that node was reached by -ASK: the extents
 *    are that node's. If the slot moved meanwhile, the node abandoned the
 *    pending put and its PUT.END answers -MOVED; if it is migrating, the
 *    node dropped the put and answers -ASK: either way the whole put is
 *    redone on the node named (the bytes written before are never published).
 *  - batches (mcRunPhase) group keys by (node, ASKING, slot): a node refuses
 *    a multi-key command whose keys hash to different slots (-CROSSSLOT,
 *    as Redis does even when it owns both), so one command per slot. The
 *    commands for all nodes are written before any reply is read --
 *    pipelining, not threads: every node works on its share at once, a
 *    phase costs one round trip however many nodes and slots it touches,
 *    and the handle's single lock and blocking connections stay as they
 *    are. Redirected groups are resent in the next round; a group refused
 *    with -TRYAGAIN (a slot migrating, some of its keys moved already) is
 *    split into single keys, which the nodes then redirect one by one.
 *  - segment ids are per node (every node's own pool is id 1), so cached
 *    segments are keyed by (node, id), and a replica's bytes are moved
 *    with the segment table of the node that named it.
 *
 * Riding through (a server restarted on its address, a cluster node killed
 * and started again, a failover): a call whose node cannot be reached --
 * its connection broke, a connect is refused -- waits (MC_LOST_BACKOFF),
 * reloads the map from another node, and tries again, until the I/O
 * timeout from the call's start (mcCallDeadline). What may be sent again on
 * a new connection: every keyed command, read or not (a PUT.START again is
 * a new put; the old connection's was abandoned with it); never PUT.END or
 * PUT.REVOKE, which belong to the connection that started the put
 * (mcRouteCommand, mcRunPhase's pinned keys): a put whose connection was
 * lost at any step is redone whole from PUT.START. Each node's connections
 * are counted (mcNode.gen): a reply, a segment description or mapping, a
 * pending put or a lease learnt on one is trusted only while that very
 * connection lives, since the server behind a new one may be a restarted
 * one whose pool is other memory under the same segment id; a transfer
 * that failed on a data connection asks the metadata one (mcNodeAlive). An
 * -EXISTS to a redone put whose PUT.END may have run is judged by reading
 * the key back (mcPutLandedAlready).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_client.h"

#define MC_MAP_REFRESH_MS 250        /* at most one CLUSTER SLOTS per this, after a MOVED */
#define MC_MAX_HOPS 32               /* redirections and retries of one command or batch */
#define MC_RIDE_MS 30000             /* how long a call rides through when the handle has no I/O timeout */

/* ---- node connections ---------------------------------------------------- */

/* (Re)opens node i's metadata connection; 0, or -1 with errbuf set. A
 * hosting handle then beats at once on that node, so its owner lives on in
 * the new connection. */
int mcNodeReconnect(mc_client *c, int i) {
    char err[256], uri[300];
    snprintf(uri, sizeof(uri), "%s", c->map.nodes[i].uri);
    mcConn *n = mcConnOpen(uri, c->connect_ms, c->io_ms, err, sizeof(err));
    if (n == NULL) return mcErr(c, -1, "%s", err);
    if (mcConnAuth(n, c->user, c->password) != MC_OK) {
        mcErr(c, -1, "%s: %s", uri, n->err);
        mcConnClose(n);
        return -1;
    }
    if (c->map.nodes[i].conn) c->reconnects++;
    mcConnClose(c->map.nodes[i].conn);
    c->map.nodes[i].conn = n;
    /* A new connection may be a new server (restarted on the same
     * address): what was learnt on the old one -- segment descriptions and
     * mappings, pending puts, leases -- is not trusted on it (see gen). */
    c->map.nodes[i].gen++;
    if (c->host && !c->hb_active) mcHeartbeatNode(c, i); /* not from within a beat */
    return 0;
}

/* Node i's metadata connection, opened if it is not (or broke). */
mcConn *mcNodeConn(mc_client *c, int i) {
    mcConn *conn = c->map.nodes[i].conn;
    if (conn && !conn->broken) return conn;
    return mcNodeReconnect(c, i) == 0 ? c->map.nodes[i].conn : NULL;
}

/* One command on node i's connection, behind ASKING when asking. reopen:
 * a broken connection is reopened once and the command sent on the new
 * one, even if it may have run on the old one -- for every command that
 * may run twice (see "Riding through"). Without it (PUT.END, PUT.REVOKE:
 * they belong to the connection that started the put) a broken connection
 * is the answer. Nor after a timeout: the server was given the whole I/O
 * timeout, which is the call's (mcCallDeadline), and a stopped or wedged
 * one takes a new connection into its backlog and answers it no sooner --
 * resent, every call waited two I/O timeouts. Nor after bytes that are
 * not RESP (MC_ERR_PROTOCOL): what answers there is not a Mooncake server,
 * and no reconnect makes it one -- ridden through as a lost connection,
 * every call hammered it with reconnects until its deadline and then
 * answered MC_ERR_IO. MC_OK with *out, or MC_ERR_IO / MC_ERR_PROTOCOL. */
static int nodeSend(mc_client *c, int i, int asking, int argc, const char **argv, const size_t *lens, mcReply **out,
                    int reopen) {
    *out = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        mcConn *conn = reopen ? mcNodeConn(c, i) : c->map.nodes[i].conn;
        if (conn == NULL || conn->broken) /* errbuf says why, for a failed reopen */
            return reopen ? MC_ERR_IO : mcErr(c, MC_ERR_IO, "the connection to %s was lost", c->map.nodes[i].uri);
        if (asking) {
            const char *a[1] = {"ASKING"};
            mcConnAppend(conn, 1, a, NULL);
        }
        mcConnAppend(conn, argc, argv, lens);
        if (mcConnFlush(conn) == MC_OK) {
            mcReply *ask = asking ? mcConnRead(conn) : NULL;
            if (!asking || ask) *out = mcConnRead(conn);
            mcReplyFree(ask);
            if (*out) return MC_OK;
        }
        if (conn->garbled) return mcErr(c, MC_ERR_PROTOCOL, "%s: %s", conn->uri, conn->err);
        mcErr(c, MC_ERR_IO, "%s", conn->err);
        if (!conn->broken || !reopen || conn->timed_out) break;
    }
    return MC_ERR_IO;
}

int mcNodeCommand(mc_client *c, int i, int asking, int argc, const char **argv, const size_t *lens,
                  mcReply **out) {
    return nodeSend(c, i, asking, argc, argv, lens, out, 1);
}

/* ---- the slot map -------------------------------------------------------- */

int mcRouteSlot(mc_client *c, unsigned slot) {
    if (!c->cluster || c->map.slots == NULL) return 0;
    uint16_t n = c->map.slots[slot];
    return n == MC_NO_NODE ? 0 : n;
}

unsigned mcSlotOf(mc_client *c, const void *key, size_t keylen) {
    return c->cluster ? mcKeySlot(key, keylen) : 0;
}

/* Reloads the slot map from CLUSTER SLOTS, asking node hint first, then
 * nodes[0], then the others; at most once per MC_MAP_REFRESH_MS unless
 * forced. Best effort: the old map stays if no node answers. Must not run
 * while replies are pending on any connection (a node that moved has its
 * connection closed). */
void mcRefreshMapFrom(mc_client *c, int hint, int avoid, int force) {
    long long now = mcNowUs();
    if (!c->cluster || (!force && now - c->map_at_us < MC_MAP_REFRESH_MS * 1000LL)) return;
    c->map_at_us = now;
    char saved[MC_ERRLEN];
    memcpy(saved, c->errbuf, sizeof(saved));
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    for (int k = -2; k < c->map.nnodes; k++) {
        int i = k == -2 ? hint : k == -1 ? 0 : k;
        if (i < 0 || i >= c->map.nnodes || (k >= 0 && (i == hint || i == 0)) || (k == -1 && hint == 0)) continue;
        if (i == avoid) continue;
        mcReply *r;
        if (mcNodeCommand(c, i, 0, 2, argv, NULL, &r) != MC_OK) continue;
        char err[256];
        int ok = mcMapApplySlots(&c->map, r, err, sizeof(err)) == 0;
        mcReplyFree(r);
        if (ok) break;
    }
    memcpy(c->errbuf, saved, sizeof(saved));
}

void mcRefreshMap(mc_client *c, int hint, int force) { mcRefreshMapFrom(c, hint, -1, force); }

/* The node a redirection names, added to the table if new (`from` when the
 * table is full). */
static int redirectNode(mc_client *c, int from, const mcRedirect *rd) {
    char ip[256];
    snprintf(ip, sizeof(ip), "%s", rd->ip[0] ? rd->ip : c->map.nodes[from].host);
    int i = mcMapNode(&c->map, NULL, ip, rd->port);
    return i < 0 ? from : i;
}

/* How long to wait before retry number `tries` of something the cluster
 * asked us to retry: 1 ms doubling, at most 100 ms, never past deadline. */
void mcBackoff(int tries, long long deadline) {
    long ms = tries >= 7 ? 100 : 1L << tries;
    if (ms > 100) ms = 100;
    if (deadline) {
        long long left = (deadline - mcNowUs()) / 1000;
        if (left <= 0) return;
        if (ms > left) ms = (long)left;
    }
    mcSleepMs(ms);
}

/* Every retry of a call -- redirections, waits, lost connections -- ends
 * by the handle's I/O timeout from the call's start (MC_RIDE_MS when it has
 * none): what a caller already accepts as the longest a call may take. */
long long mcCallDeadline(mc_client *c) {
    return mcNowUs() + (long long)(c->io_ms > 0 ? c->io_ms : MC_RIDE_MS) * 1000;
}

/* Node i's connection is the one gen named, and alive as far as we know:
 * what the server granted on it (a pending put, a lease) still stands. */
int mcNodeSame(const mc_client *c, int i, unsigned gen) {
    const mcConn *conn = c->map.nodes[i].conn;
    return conn && !conn->broken && c->map.nodes[i].gen == gen;
}

/* Whether node i's connection gen still stands, asked of the server (a
 * PING) when nothing says otherwise: a transfer that failed on a data
 * connection (another socket) does not tell whether the server behind the
 * metadata one died too. On failure paths only. */
int mcNodeAlive(mc_client *c, int i, unsigned gen) {
    if (!mcNodeSame(c, i, gen)) return 0;
    char saved[MC_ERRLEN];
    memcpy(saved, c->errbuf, sizeof(saved));
    const char *argv[1] = {"PING"};
    mcReply *r;
    int ok = nodeSend(c, i, 0, 1, argv, NULL, &r, 0) == MC_OK;
    mcReplyFree(r);
    memcpy(c->errbuf, saved, sizeof(saved));
    return ok;
}

/* After node i could not be reached: a pause, then the map from another
 * node (it may name a new owner for the slot); MC_OK to try again, or
 * the I/O error when the call's time is up. */
static int rideLost(mc_client *c, int i, int *tries, long long deadline) {
    if (mcNowUs() >= deadline) return MC_ERR_IO;
    mcBackoff(MC_LOST_BACKOFF + (*tries)++, deadline);
    mcRefreshMapFrom(c, -1, i, 0);
    return mcNowUs() < deadline ? MC_OK : MC_ERR_IO;
}

/* A keyed command, sent to the owner of the key's slot and redirected as
 * the cluster says; a lost connection, -TRYAGAIN and -CLUSTERDOWN are
 * waited out until the call's deadline. MC_OK with *out (which may be any
 * reply, errors included: the cluster's own words when it never settled)
 * and *rt, where it was answered; or MC_ERR_* when no node could be
 * reached in time. The command may reach the server twice (sent, the
 * connection lost before its answer): keyed commands are all ones that
 * may (see "Riding through"). */
int mcKeyCommand(mc_client *c, const void *key, size_t keylen, int argc, const char **argv, const size_t *lens,
                 mcReply **out, mcRoute *rt) {
    unsigned slot = mcSlotOf(c, key, keylen);
    long long deadline = mcCallDeadline(c);
    int downs = 0, waits = 0, lost = 0, hops = 0;
    rt->node = mcRouteSlot(c, slot);
    rt->asking = 0;
    for (;;) {
        int rc = mcNodeCommand(c, rt->node, rt->asking, argc, argv, lens, out);
        if (rc == MC_ERR_PROTOCOL) return rc; /* not a lost node: a wrong one (nodeSend) */
        if (rc != MC_OK) {
            char why[MC_ERRLEN];
            memcpy(why, c->errbuf, sizeof(why));
            if (rideLost(c, rt->node, &lost, deadline) != MC_OK) {
                memcpy(c->errbuf, why, sizeof(why));
                return rc;
            }
            rt->node = mcRouteSlot(c, slot);
            rt->asking = 0;
            continue;
        }
        rt->gen = c->map.nodes[rt->node].gen;
        if (!c->cluster) return MC_OK;
        mcRedirect rd;
        int kind = mcRedirectParse(*out, &rd);
        if (kind == MC_REDIR_NONE || mcNowUs() > deadline) return MC_OK;
        if ((kind == MC_REDIR_MOVED || kind == MC_REDIR_ASK) && ++hops > MC_MAX_HOPS) return MC_OK;
        mcReplyFree(*out);
        *out = NULL;
        if (kind == MC_REDIR_MOVED) {
            int to = redirectNode(c, rt->node, &rd);
            if (c->map.slots) c->map.slots[rd.slot] = (uint16_t)to;
            mcRefreshMap(c, to, 0);
            rt->node = mcRouteSlot(c, slot);
            rt->asking = 0;
            if (hops >= 3) mcBackoff(waits++, deadline); /* two nodes disagreeing for a moment */
        } else if (kind == MC_REDIR_ASK) {
            rt->node = redirectNode(c, rt->node, &rd);
            rt->asking = 1;
        } else if (kind == MC_REDIR_TRYAGAIN) {
            mcBackoff(waits++, deadline);
            rt->node = mcRouteSlot(c, slot);
            rt->asking = 0;
        } else { /* CLUSTERDOWN: the map may be what is wrong; else a node is down, wait for it */
            mcBackoff(5 + downs++, deadline);
            mcRefreshMap(c, rt->node, 1);
            rt->node = mcRouteSlot(c, slot);
            rt->asking = 0;
        }
    }
}

/* A command for the node that answered an earlier one on the connection
 * rt names (PUT.END after PUT.START), behind ASKING if that one was:
 * -TRYAGAIN and -CLUSTERDOWN are waited out there; a redirection is
 * returned to the caller (*redirected 1, the map patched) -- the node gave
 * the slot away; so is a lost connection (*redirected 2, MC_ERR_IO): what
 * the first command started died with it, and the command is never sent
 * on another connection. */
int mcRouteCommand(mc_client *c, const mcRoute *rt, int argc, const char **argv, const size_t *lens,
                   mcReply **out, int *redirected) {
    long long deadline = mcCallDeadline(c);
    *redirected = 0;
    for (int tries = 0;; tries++) {
        int rc = mcNodeSame(c, rt->node, rt->gen) ? nodeSend(c, rt->node, rt->asking, argc, argv, lens, out, 0)
                                                 : mcErr(c, MC_ERR_IO, "the connection that started it was lost");
        if (rc != MC_OK) {
            *redirected = 2;
            return rc;
        }
        if (!c->cluster) return rc;
        mcRedirect rd;
        int kind = mcRedirectParse(*out, &rd);
        if (kind == MC_REDIR_MOVED || kind == MC_REDIR_ASK) {
            if (kind == MC_REDIR_MOVED && c->map.slots) c->map.slots[rd.slot] = (uint16_t)redirectNode(c, rt->node, &rd);
            *redirected = 1;
            return MC_OK;
        }
        if (kind == MC_REDIR_NONE || mcNowUs() > deadline) return MC_OK;
        mcReplyFree(*out);
        *out = NULL;
        mcBackoff(kind == MC_REDIR_CLUSTERDOWN ? 5 + tries : tries, deadline);
    }
}

/* ---- batch metadata: one phase over many keys ---------------------------- */

typedef struct mcGroup {
    size_t first, count;         /* a run of order[] */
    int node, asking;
    mcConn *conn;                /* NULL: could not be sent */
} mcGroup;

static int bkeyCompare(const void *a, const void *b, void *arg) {
    const mcBKey *k = arg;
    const mcBKey *x = &k[*(const size_t *)a], *y = &k[*(const size_t *)b];
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    if (x->asking != y->asking) return x->asking - y->asking;
    if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : *(const size_t *)a > *(const size_t *)b;
}

/* What a group's reply means for its keys; sets *wait_ms when the next
 * round should wait, *refresh when the map should be reloaded first. */
/* BATCH.EXISTS ... PREFIX answers one integer for its keys, not an array:
 * how many of them, from the first, are present (keys in a group keep the
 * caller's order, bkeyCompare). */
static int phaseCounted(const mcPhase *ph, const mcReply *r, size_t count) {
    return ph->numkeys && !strcmp(ph->cmd, "BATCH.EXISTS") && r->type == MCR_INT && r->integer >= 0 &&
           (unsigned long long)r->integer <= count;
}

static void phaseReply(mc_client *c, const mcPhase *ph, mcBKey *k, const size_t *idx, size_t count, int node,
                       mcReply *r, int *downs, int *wait_tries, int *refresh, mcReply **last_redirect) {
    mcRedirect rd;
    int kind = c->cluster ? mcRedirectParse(r, &rd) : MC_REDIR_NONE;
    if (kind == MC_REDIR_NONE) {
        if (ph->single) {
            k[idx[0]].res = r;
            k[idx[0]].done = 1;
            return;
        }
        if (phaseCounted(ph, r, count)) {
            for (size_t j = 0; j < count; j++) {
                k[idx[j]].counted = j < (size_t)r->integer;
                k[idx[j]].done = 1;
            }
            mcReplyFree(r);
            return;
        }
        if (r->type == MCR_ARRAY && r->elements == count) {
            for (size_t j = 0; j < count; j++) {
                k[idx[j]].res = r->element[j];
                r->element[j] = NULL;
                k[idx[j]].done = 1;
            }
        } else {
            int code = r->type == MCR_ERROR ? mcErrReply(c, r) : mcErr(c, MC_ERR_PROTOCOL, "bad %s reply", ph->cmd);
            for (size_t j = 0; j < count; j++) {
                k[idx[j]].rc = code;
                k[idx[j]].done = 1;
            }
        }
        mcReplyFree(r);
        return;
    }
    int to = kind == MC_REDIR_MOVED || kind == MC_REDIR_ASK ? redirectNode(c, node, &rd) : node;
    if (kind == MC_REDIR_MOVED && c->map.slots) {
        c->map.slots[rd.slot] = (uint16_t)to;
        *refresh = *refresh ? *refresh : 1;
    }
    if (kind == MC_REDIR_CLUSTERDOWN) ++*downs; /* waited out until the deadline: a node may be restarting */
    for (size_t j = 0; j < count; j++) {
        mcBKey *b = &k[idx[j]];
        if (kind == MC_REDIR_NONE || (b->pinned && (kind == MC_REDIR_MOVED || kind == MC_REDIR_ASK))) {
            b->rc = mcErrReply(c, r);
            b->moved = kind != MC_REDIR_NONE;
            b->done = 1;
        } else if (kind == MC_REDIR_MOVED) {
            b->node = mcRouteSlot(c, b->slot);
            b->asking = 0;
        } else if (kind == MC_REDIR_ASK) {
            b->node = to;
            b->asking = 1;
        } else if (kind == MC_REDIR_TRYAGAIN && count > 1) {
            b->alone = 1; /* keys of a migrating slot: each goes its own way */
        }
    }
    if (kind == MC_REDIR_TRYAGAIN && count == 1) ++*wait_tries;
    if (kind == MC_REDIR_CLUSTERDOWN) {
        ++*wait_tries;
        *refresh = 2;
    }
    mcReplyFree(*last_redirect);
    *last_redirect = r;
}

/* Runs one metadata phase of a batch over n keys: groups them by (node,
 * ASKING, slot) -- one group in all for a non-cluster server --, writes
 * every group's command to every node before reading any reply, and
 * resends what the cluster redirected, round after round. Each key ends
 * with rc and res (the caller frees res). Returns MC_OK when some key got
 * an answer of its own, else the failure every key shares (MC_ERR_IO when
 * no node could be reached, a refused command's code): the batch as a
 * whole failed. */
int mcRunPhase(mc_client *c, const mcPhase *ph, mcBKey *k, size_t n) {
    size_t *order = malloc((n ? n : 1) * sizeof(*order));
    mcGroup *groups = malloc((n ? n : 1) * sizeof(*groups));
    size_t maxargs = 2 + 2 * n + (size_t)ph->ntail;
    const char **argv = malloc(maxargs * sizeof(*argv));
    size_t *lens = malloc(maxargs * sizeof(*lens));
    mcReply *last_redirect = NULL;
    int rc = MC_OK;
    if (!order || !groups || !argv || !lens) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        k[i].done = k[i].moved = k[i].lost = k[i].ioerr = 0;
        k[i].rc = MC_OK;
        k[i].res = NULL;
        k[i].alone = ph->single;
        if (!k[i].pinned) {
            k[i].node = mcRouteSlot(c, k[i].slot);
            k[i].asking = 0;
        }
    }
    long long deadline = mcCallDeadline(c);
    int downs = 0, wait_tries = 0, lost_tries = 0, hops = 0;
    for (int round = 0;; round++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            mcBKey *b = &k[i];
            if (!b->done && b->pinned && !mcNodeSame(c, b->node, b->gen)) {
                /* What it ends (a pending put) died with its connection:
                 * never sent on another one; the caller redoes it. */
                b->rc = mcErr(c, MC_ERR_IO, "the connection that started it was lost");
                b->moved = b->done = 1;
            }
            if (!b->done) order[m++] = i;
        }
        if (m == 0) break;
        if (hops >= MC_MAX_HOPS || (round && mcNowUs() > deadline)) {
            int code = last_redirect ? mcErrReply(c, last_redirect)
                                     : mcErr(c, MC_ERR_IO, "%s: no answer after %d rounds", ph->cmd, round);
            for (size_t j = 0; j < m; j++) {
                k[order[j]].rc = code;
                k[order[j]].done = 1;
            }
            break;
        }
        qsort_r(order, m, sizeof(*order), bkeyCompare, k);
        /* Groups: runs of one node, ASKING state and slot. */
        size_t ng = 0;
        for (size_t j = 0; j < m; j++) {
            const mcBKey *b = &k[order[j]];
            mcGroup *g = ng ? &groups[ng - 1] : NULL;
            if (g == NULL || b->alone || k[order[g->first]].alone || b->node != g->node || b->asking != g->asking ||
                b->slot != k[order[g->first]].slot) {
                g = &groups[ng++];
                g->first = j;
                g->count = 0;
                g->node = b->node;
                g->asking = b->asking;
                g->conn = NULL;
            }
            g->count++;
        }
        /* Send every group, then flush each node's connection once. */
        for (size_t gi = 0; gi < ng; gi++) {
            mcGroup *g = &groups[gi];
            g->conn = gi && groups[gi - 1].node == g->node ? groups[gi - 1].conn : mcNodeConn(c, g->node);
            if (g->conn == NULL) continue;
            if (g->asking) {
                const char *a[1] = {"ASKING"};
                mcConnAppend(g->conn, 1, a, NULL);
            }
            char nbuf[24];
            size_t argc = 0;
            argv[argc++] = ph->cmd;
            if (ph->numkeys) {
                mcFmtU64(nbuf, sizeof(nbuf), g->count);
                argv[argc++] = nbuf;
            }
            for (size_t j = 0; j < g->count; j++) {
                const mcBKey *b = &k[order[g->first + j]];
                lens[argc] = b->keylen;
                argv[argc++] = b->key;
                if (b->arg) {
                    lens[argc] = strlen(b->arg);
                    argv[argc++] = b->arg;
                }
            }
            for (int t = 0; t < ph->ntail; t++) {
                lens[argc] = strlen(ph->tail[t]);
                argv[argc++] = ph->tail[t];
            }
            lens[0] = strlen(ph->cmd);
            if (ph->numkeys) lens[1] = strlen(nbuf);
            mcConnAppend(g->conn, (int)argc, argv, lens); /* small arguments are copied now */
        }
        for (size_t gi = 0; gi < ng; gi++) {
            mcGroup *g = &groups[gi];
            if (g->conn == NULL || (gi && groups[gi - 1].conn == g->conn)) continue;
            if (mcConnFlush(g->conn) != MC_OK) mcErr(c, MC_ERR_IO, "%s", g->conn->err);
        }
        /* Read the replies in the order they were sent. */
        int refresh = 0, had_wait = wait_tries, lost_node = -1;
        for (size_t gi = 0; gi < ng; gi++) {
            mcGroup *g = &groups[gi];
            mcReply *r = NULL;
            int sent = g->conn && !g->conn->broken;
            if (sent) {
                mcReply *ask = g->asking ? mcConnRead(g->conn) : NULL;
                if (!g->asking || ask) r = mcConnRead(g->conn);
                mcReplyFree(ask);
                if (r == NULL) mcErr(c, MC_ERR_IO, "%s", g->conn->err);
            }
            if (r == NULL && g->conn && g->conn->garbled) {
                /* Bytes that are not RESP: no retry makes them so (nodeSend). */
                int code = mcErr(c, MC_ERR_PROTOCOL, "%s: %s", g->conn->uri, g->conn->err);
                for (size_t j = 0; j < g->count; j++) {
                    k[order[g->first + j]].rc = code;
                    k[order[g->first + j]].done = 1;
                }
                continue;
            }
            if (r == NULL) {
                /* Not sent, or the connection broke. A pinned key's put
                 * died with it (redone by the caller; it may have ended
                 * first). Others are sent again, on a new connection, to
                 * the slot's owner as the map then says, after a pause
                 * from the second time on, until the deadline. */
                for (size_t j = 0; j < g->count; j++) {
                    mcBKey *b = &k[order[g->first + j]];
                    if (b->pinned) {
                        b->rc = MC_ERR_IO;
                        b->moved = b->done = 1;
                        b->lost = sent;
                    } else if (++b->ioerr >= 2 && mcNowUs() >= deadline) {
                        b->rc = MC_ERR_IO;
                        b->done = 1;
                    } else if (b->ioerr >= 2) {
                        lost_node = g->node;
                    }
                }
                continue;
            }
            for (size_t j = 0; j < g->count; j++) k[order[g->first + j]].gen = c->map.nodes[g->node].gen;
            phaseReply(c, ph, k, &order[g->first], g->count, g->node, r, &downs, &wait_tries, &refresh,
                       &last_redirect);
        }
        /* Between rounds, with no reply outstanding: waits and map reloads
         * (redirected again and again: two nodes disagreeing for a moment). */
        if (lost_node >= 0) {
            char why[MC_ERRLEN];
            memcpy(why, c->errbuf, sizeof(why));
            mcBackoff(MC_LOST_BACKOFF + lost_tries++, deadline);
            mcRefreshMapFrom(c, -1, lost_node, 0);
            memcpy(c->errbuf, why, sizeof(why));
            for (size_t i = 0; i < n; i++)
                if (!k[i].done && !k[i].pinned) {
                    k[i].node = mcRouteSlot(c, k[i].slot);
                    k[i].asking = 0;
                }
        } else if (wait_tries > had_wait) {
            mcBackoff(refresh == 2 ? 5 + downs : wait_tries, deadline);
        } else if (refresh && hops >= 2) {
            mcBackoff(hops - 2, deadline);
        }
        if (lost_node < 0 && wait_tries == had_wait) hops++; /* a round of redirections only */
        if (refresh) {
            mcRefreshMap(c, 0, refresh == 2);
            for (size_t i = 0; i < n; i++)
                if (!k[i].done && !k[i].pinned && !k[i].asking) k[i].node = mcRouteSlot(c, k[i].slot);
        }
    }
    /* The batch failed as a whole if no key got an answer of its own (a
     * pinned key redirected got one: its put is to be redone). */
    rc = n ? k[0].rc : MC_OK;
    for (size_t i = 0; i < n && rc != MC_OK; i++)
        if (k[i].rc == MC_OK || k[i].moved || k[i].rc != rc) rc = MC_OK;
end:
    mcReplyFree(last_redirect);
    free(order);
    free(groups);
    free(argv);
    free(lens);
    return rc;
}

void mcFreeBKeys(mcBKey *k, size_t n) {
    for (size_t i = 0; k && i < n; i++) mcReplyFree(k[i].res);
    free(k);
}

