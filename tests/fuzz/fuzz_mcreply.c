/* fuzz_mcreply.c -- libFuzzer target for what libmooncake reads from a
 * server or a segment's host: the reply side of its RESP connection
 * (src/libmooncake/mc_conn.c) and the parsers that take those replies
 * apart (mc_cluster.c: CLUSTER SLOTS and the redirections).
 *
 * The bytes arrive the way they do in the library: through a socket. Each
 * input is written into one end of a unix socketpair, that end is shut, and
 * an mcConn on the other end reads until the stream ends or the connection
 * is declared broken -- the same code path, recvmsg and buffer growth
 * included, as a reply from a real peer. The first input byte picks the
 * reading mode, as the library's callers differ in what they expect:
 *
 *   0  whole replies (mcConnRead), each checked for shape, then handed to
 *      mcReplyInt, mcRedirectParse and mcMapApplySlots as a CLUSTER SLOTS
 *      reply; the map must stay consistent whatever they accept
 *   1  bulk replies read straight into a caller's buffers (SEG.READ):
 *      byte 1 is the capacity, byte 2 how many pieces it is cut into; no
 *      byte may land outside them
 *   2  an array header, then its elements as bulks into a buffer (the
 *      shape of SEG.READV's reply)
 *   3  a segment's RDMA descriptor as SEGMENT.INFO hands it out (mc_rdma.c:
 *      mcRdmaDescParse): the endpoint, '\n', the RKEY text; one that
 *      parses must format and parse back to the same keys
 *
 * Bits 2-3 of the first byte are how many replies come first for commands
 * sent without waiting (mcConnAppendNoReply: c->discard), which every read
 * skips before its own.
 *
 * A broken invariant is FUZZ_CHECK's __builtin_trap(), which libFuzzer
 * reports with the input saved; AddressSanitizer catches the rest.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "libmooncake/mc_cluster.h"
#include "libmooncake/mc_conn.h"
#include "libmooncake/mc_rdma.h"
#include "libmooncake/mooncake.h"

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) __builtin_trap(); \
    } while (0)

#define GUARD 16

static void checkReply(const mcReply *r, int depth) {
    FUZZ_CHECK(r != NULL && depth <= 16);
    switch (r->type) {
    case MCR_STATUS:
    case MCR_ERROR:
    case MCR_BULK:
        FUZZ_CHECK(r->str != NULL && r->str[r->len] == '\0');
        break;
    case MCR_INT:
    case MCR_NIL:
        break;
    case MCR_ARRAY:
        FUZZ_CHECK(r->elements == 0 || r->element != NULL);
        for (size_t i = 0; i < r->elements; i++) checkReply(r->element[i], depth + 1);
        break;
    default:
        FUZZ_CHECK(0);
    }
}

static void checkMap(const mcMap *m) {
    FUZZ_CHECK(m->nnodes >= 1 && m->nnodes <= MC_MAX_NODES && m->nnodes <= m->cap);
    for (int i = 0; i < m->nnodes; i++) {
        const mcNode *n = &m->nodes[i];
        FUZZ_CHECK(memchr(n->id, '\0', sizeof(n->id)) && memchr(n->addr, '\0', sizeof(n->addr)));
        FUZZ_CHECK(memchr(n->uri, '\0', sizeof(n->uri)) && memchr(n->host, '\0', sizeof(n->host)));
        FUZZ_CHECK(n->first_slot >= -1 && n->first_slot < MC_SLOTS);
    }
    if (m->slots == NULL) return;
    for (int s = 0; s < MC_SLOTS; s++) {
        if (m->slots[s] == MC_NO_NODE) continue;
        FUZZ_CHECK(m->slots[s] < m->nnodes);
        const mcNode *n = &m->nodes[m->slots[s]];
        FUZZ_CHECK(n->primary && n->first_slot >= 0 && n->first_slot <= s);
    }
}

static void parsers(const mcReply *r, mcMap *map) {
    int ok;
    (void)mcReplyInt(r, &ok);
    (void)mcReplyIsError(r, "MOVED");
    mcRedirect rd;
    int kind = mcRedirectParse(r, &rd);
    FUZZ_CHECK(kind >= MC_REDIR_NONE && kind <= MC_REDIR_CLUSTERDOWN);
    if (kind == MC_REDIR_MOVED || kind == MC_REDIR_ASK) {
        FUZZ_CHECK(rd.slot >= 0 && rd.slot < MC_SLOTS && rd.port > 0 && rd.port <= 65535);
        FUZZ_CHECK(memchr(rd.ip, '\0', sizeof(rd.ip)) != NULL);
    }
    char err[256];
    uint16_t *before = map->slots;
    int rc = mcMapApplySlots(map, r, err, sizeof(err));
    /* A refused reply leaves the old map as it was. */
    if (rc != 0) FUZZ_CHECK(map->slots == before && memchr(err, '\0', sizeof(err)) != NULL);
    checkMap(map);
}

static void readReplies(mcConn *c) {
    mcMap map;
    memset(&map, 0, sizeof(map));
    FUZZ_CHECK(mcMapNode(&map, NULL, "127.0.0.1", 6379) == 0); /* nodes[0], the seed */
    for (int n = 0; n < 4096; n++) {
        mcReply *r = mcConnRead(c);
        if (r == NULL) break;
        checkReply(r, 0);
        parsers(r, &map);
        mcReplyFree(r);
    }
    mcMapFree(&map);
}

/* Buffers of exactly their size, between guards that must stay intact. */
static void readBulks(mcConn *c, size_t cap, int pieces, int as_array) {
    char *buf = malloc(cap + 2 * GUARD);
    FUZZ_CHECK(buf != NULL);
    for (int n = 0; n < 4096 && !c->broken; n++) {
        memset(buf, 0xa5, cap + 2 * GUARD);
        struct iovec iov[4];
        size_t off = 0;
        for (int i = 0; i < pieces; i++) {
            size_t len = i == pieces - 1 ? cap - off : cap / (size_t)pieces;
            iov[i] = (struct iovec){buf + GUARD + off, len};
            off += len;
        }
        mcReply *err = NULL;
        long long elems = 1;
        if (as_array) {
            elems = mcConnReadArrayLen(c, &err);
            if (err) mcReplyFree(err);
            if (elems < 0 || err) continue;
        }
        for (long long i = 0; i < elems && i < 64 && !c->broken; i++) {
            err = NULL;
            long long got = mcConnReadBulkIntoV(c, iov, pieces, &err);
            FUZZ_CHECK(got <= (long long)cap);
            FUZZ_CHECK(got < 0 || err == NULL);
            if (err) {
                checkReply(err, 0);
                mcReplyFree(err);
            }
            for (size_t g = 0; g < GUARD; g++)
                FUZZ_CHECK((unsigned char)buf[g] == 0xa5 && (unsigned char)buf[GUARD + cap + g] == 0xa5);
        }
    }
    free(buf);
}

static void descriptor(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    char *nl = memchr(text, '\n', size), err[256];
    const char *rkeys = nl ? nl + 1 : "";
    if (nl) *nl = '\0';
    mcRdmaDesc d, again;
    if (mcRdmaDescParse(&d, text, 4096, rkeys, err, sizeof(err)) == 0) {
        FUZZ_CHECK(d.port >= 1 && d.port <= 65535 && d.nkeys >= 1 && d.nkeys <= MC_RDMA_MAX_NICS);
        FUZZ_CHECK(memchr(d.host, '\0', sizeof(d.host)) != NULL && d.host[0] != '\0');
        char keys[MC_RDMA_MAX_NICS * 80];
        FUZZ_CHECK(mcRdmaDescFormatKeys(&d, keys, sizeof(keys)) > 0);
        FUZZ_CHECK(mcRdmaDescParse(&again, text, 4096, keys, err, sizeof(err)) == 0);
        FUZZ_CHECK(again.nkeys == d.nkeys);
        for (int i = 0; i < d.nkeys; i++)
            FUZZ_CHECK(again.rkey[i] == d.rkey[i] && strcmp(again.nic[i], d.nic[i]) == 0);
    } else {
        FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL && d.nkeys == 0);
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    if (data[0] % 4 == 3) {
        descriptor(data + 3, size - 3);
        return 0;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
    /* At most -max_len bytes: they fit in the socket's buffer at once. */
    size_t off = 3;
    while (off < size) {
        ssize_t w = write(sv[1], data + off, size - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    shutdown(sv[1], SHUT_WR);

    mcConn *c = calloc(1, sizeof(*c));
    FUZZ_CHECK(c != NULL);
    c->fd = sv[0];
    c->is_unix = 1;
    c->recv_fd = -1;
    c->spin_us = 0;
    c->discard = (data[0] >> 2) & 3;
    switch (data[0] % 4) {
    case 0: readReplies(c); break;
    case 1: readBulks(c, data[1], 1 + data[2] % 4, 0); break;
    default: readBulks(c, data[1], 1 + data[2] % 4, 1); break;
    }
    mcConnClose(c); /* closes sv[0] */
    close(sv[1]);
    return 0;
}
