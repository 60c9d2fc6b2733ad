/* mc_cluster.c -- libmooncake's view of a Redis-Cluster-shaped deployment.
 *
 * A mooncake-server started with cluster-enabled is one shard of a store
 * whose 16384 slots are spread over several primaries, exactly as in Redis
 * Cluster: a key belongs to slot CRC16(key or its {hash tag}) mod 16384,
 * and a node that does not own a key's slot answers -MOVED (the slot lives
 * elsewhere now) or -ASK (the slot is being migrated and this key is
 * already on the target: ask it, once). This file holds what the library
 * needs to know about that, and nothing about how commands are sent:
 *
 *  - the node table: every metadata server the handle has heard of, by the
 *    "ip:port" the cluster announces and, once known, by node id. Entries
 *    are never removed, so an index stays valid for the handle's life (a
 *    node that left simply owns no slots); nodes[0] is the server the
 *    handle was given, which may be a unix socket the map cannot name.
 *  - the slot map: slot -> node index, rebuilt from CLUSTER SLOTS and
 *    patched by each MOVED. MC_NO_NODE means "ask anyone": nodes[0] gets
 *    the command and redirects it.
 *  - parsing -MOVED/-ASK/-TRYAGAIN/-CLUSTERDOWN.
 *  - the plan that cuts a hosted segment into one slice per primary.
 *
 * Why nodes are matched by id first: the handle reaches nodes[0] by the
 * URI it was given (unix:///..., a host name), which never equals the
 * announced ip:port; CLUSTER MYID on that connection ties the two, so the
 * seed connection serves the seed's slots instead of a second connection
 * to the same process.
 */
#include "mc_cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc.h"

unsigned mcKeySlot(const void *key, size_t keylen) { return keyHashSlot(key, keylen); }

/* ---- nodes ------------------------------------------------------------------- */

/* nodes[0] keeps the URI and host it was reached by (seed != 0). */
static void nodeSetAddr(mcNode *n, const char *ip, int port, int seed) {
    int v6 = strchr(ip, ':') != NULL;
    snprintf(n->addr, sizeof(n->addr), "%s:%d", ip, port);
    if (seed) return;
    snprintf(n->host, sizeof(n->host), "%s", ip);
    snprintf(n->uri, sizeof(n->uri), v6 ? "tcp://[%s]:%d" : "tcp://%s:%d", ip, port);
}

int mcMapNode(mcMap *m, const char *id, const char *ip, int port) {
    char addr[280];
    snprintf(addr, sizeof(addr), "%s:%d", ip, port);
    int by_addr = -1;
    for (int i = 0; i < m->nnodes; i++) {
        mcNode *n = &m->nodes[i];
        if (id && id[0] && !strcmp(n->id, id)) {
            if (strcmp(n->addr, addr)) {
                /* The node moved (restarted elsewhere): forget the old
                 * connection; nodes[0] keeps the URI it was given. */
                nodeSetAddr(n, ip, port, i == 0);
                if (i != 0) {
                    mcConnClose(n->conn);
                    n->conn = NULL;
                }
            }
            return i;
        }
        if (by_addr < 0 && n->addr[0] && !strcmp(n->addr, addr) && (!n->id[0] || !id || !id[0])) by_addr = i;
    }
    if (by_addr >= 0) {
        if (id && id[0]) snprintf(m->nodes[by_addr].id, sizeof(m->nodes[by_addr].id), "%s", id);
        return by_addr;
    }
    if (m->nnodes >= MC_MAX_NODES) return -1;
    if (m->nnodes == m->cap) {
        int cap = m->cap ? m->cap * 2 : 8;
        mcNode *p = realloc(m->nodes, (size_t)cap * sizeof(*p));
        if (p == NULL) return -1;
        m->nodes = p;
        m->cap = cap;
    }
    mcNode *n = &m->nodes[m->nnodes];
    memset(n, 0, sizeof(*n));
    n->first_slot = -1;
    if (id) snprintf(n->id, sizeof(n->id), "%s", id);
    nodeSetAddr(n, ip, port, 0);
    return m->nnodes++;
}

void mcMapFree(mcMap *m) {
    for (int i = 0; i < m->nnodes; i++) mcConnClose(m->nodes[i].conn);
    free(m->nodes);
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

/* ---- the slot map ------------------------------------------------------------- */

static int slotInt(const mcReply *r, long long lo, long long hi, long long *v) {
    int ok;
    *v = mcReplyInt(r, &ok);
    return ok && *v >= lo && *v <= hi;
}

int mcMapApplySlots(mcMap *m, const mcReply *r, char *err, size_t errlen) {
    if (r == NULL || r->type != MCR_ARRAY) {
        snprintf(err, errlen, "CLUSTER SLOTS: %s", r && r->type == MCR_ERROR ? r->str : "not an array");
        return -1;
    }
    uint16_t *slots = malloc(MC_SLOTS * sizeof(*slots));
    if (slots == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int s = 0; s < MC_SLOTS; s++) slots[s] = MC_NO_NODE;
    /* Parse everything before touching the nodes' flags, so a bad reply
     * leaves the old map whole. */
    for (size_t i = 0; i < r->elements; i++) {
        const mcReply *e = r->element[i];
        long long start, end, port;
        if (e->type != MCR_ARRAY || e->elements < 3 || !slotInt(e->element[0], 0, MC_SLOTS - 1, &start) ||
            !slotInt(e->element[1], start, MC_SLOTS - 1, &end)) {
            snprintf(err, errlen, "CLUSTER SLOTS: bad range %zu", i);
            goto bad;
        }
        const mcReply *nd = e->element[2];
        if (nd->type != MCR_ARRAY || nd->elements < 2 || nd->element[0]->type != MCR_BULK ||
            !slotInt(nd->element[1], 1, 65535, &port)) {
            snprintf(err, errlen, "CLUSTER SLOTS: bad node in range %zu", i);
            goto bad;
        }
        const char *id = nd->elements >= 3 && nd->element[2]->type == MCR_BULK ? nd->element[2]->str : NULL;
        int idx = mcMapNode(m, id, nd->element[0]->str, (int)port);
        if (idx < 0) {
            snprintf(err, errlen, "CLUSTER SLOTS: too many nodes");
            goto bad;
        }
        for (long long s = start; s <= end; s++) slots[s] = (uint16_t)idx;
        /* Its replicas: known nodes, never routed to, that a client whose
         * primary died can ask for the map the failover made (the table's
         * room permitting). */
        for (size_t j = 3; j < e->elements; j++) {
            const mcReply *rn = e->element[j];
            long long rport;
            if (rn->type != MCR_ARRAY || rn->elements < 2 || rn->element[0]->type != MCR_BULK ||
                !slotInt(rn->element[1], 1, 65535, &rport))
                continue;
            const char *rid = rn->elements >= 3 && rn->element[2]->type == MCR_BULK ? rn->element[2]->str : NULL;
            (void)mcMapNode(m, rid, rn->element[0]->str, (int)rport);
        }
    }
    for (int i = 0; i < m->nnodes; i++) {
        m->nodes[i].primary = 0;
        m->nodes[i].first_slot = -1;
    }
    for (int s = 0; s < MC_SLOTS; s++) {
        if (slots[s] == MC_NO_NODE) continue;
        mcNode *n = &m->nodes[slots[s]];
        if (!n->primary) n->first_slot = s;
        n->primary = 1;
    }
    free(m->slots);
    m->slots = slots;
    return 0;
bad:
    free(slots);
    return -1;
}

/* ---- redirections -------------------------------------------------------------- */

static int wordIs(const mcReply *r, const char *w) {
    size_t n = strlen(w);
    return r->len >= n && !strncmp(r->str, w, n) && (r->str[n] == ' ' || r->str[n] == '\0');
}

int mcRedirectParse(const mcReply *r, mcRedirect *out) {
    memset(out, 0, sizeof(*out));
    if (r == NULL || r->type != MCR_ERROR || r->str == NULL) return MC_REDIR_NONE;
    if (wordIs(r, "TRYAGAIN")) return out->kind = MC_REDIR_TRYAGAIN;
    if (wordIs(r, "CLUSTERDOWN")) return out->kind = MC_REDIR_CLUSTERDOWN;
    int kind = wordIs(r, "MOVED") ? MC_REDIR_MOVED : wordIs(r, "ASK") ? MC_REDIR_ASK : MC_REDIR_NONE;
    if (kind == MC_REDIR_NONE) return kind;
    /* "MOVED <slot> <ip>:<port>"; the ip may hold colons (IPv6) or be
     * empty (a node that does not know its own address). */
    const char *p = strchr(r->str, ' ');
    char *end;
    errno = 0;
    long slot = p ? strtol(p + 1, &end, 10) : -1;
    if (p == NULL || errno || end == p + 1 || *end != ' ' || slot < 0 || slot >= MC_SLOTS) return MC_REDIR_NONE;
    const char *target = end + 1, *colon = strrchr(target, ':');
    if (colon == NULL || (size_t)(colon - target) >= sizeof(out->ip)) return MC_REDIR_NONE;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535) return MC_REDIR_NONE;
    memcpy(out->ip, target, (size_t)(colon - target));
    out->ip[colon - target] = '\0';
    if (out->ip[0] == '[') { /* [v6]:port */
        size_t l = strlen(out->ip);
        if (l >= 2 && out->ip[l - 1] == ']') {
            memmove(out->ip, out->ip + 1, l - 2);
            out->ip[l - 2] = '\0';
        }
    }
    out->slot = (int)slot;
    out->port = (int)port;
    return out->kind = kind;
}

/* ---- slices of a hosted segment ------------------------------------------------ */

size_t mcSliceAlign(size_t each) {
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 4096 ? (size_t)pg : 4096;
    size_t huge = 2 * 1024 * 1024;
    return each >= 64 * 1024 * 1024 && huge > page ? huge : page;
}

int mcSlicePlan(size_t size, int n, size_t align, size_t min, size_t *off, size_t *len) {
    if (n <= 0 || align == 0 || (align & (align - 1))) return -1;
    size_t each = size / (size_t)n / align * align;
    if (each < min || each == 0) return -1;
    for (int i = 0; i < n; i++) {
        off[i] = (size_t)i * each;
        len[i] = i == n - 1 ? size - off[i] : each;
    }
    return 0;
}
