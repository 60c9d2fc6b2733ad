/* t_data.c -- the data plane of the server's own segments (SPEC §4.3).
 *
 * Metadata commands hand out extents; these commands move the bytes of
 * extents held in this process's memory, for clients that cannot map it:
 *
 *   SEG.WRITE seg-id offset payload   into an extent of a *pending* object
 *   SEG.READ seg-id offset length     out of an extent of a *complete* one
 *   SEG.WRITEV / SEG.READV            many ranges of one segment at once
 *   SHM.ATTACH seg-id                 the segment's memfd, by SCM_RIGHTS
 *
 * Every range is mapped back to the extent that holds its first byte (the
 * allocator's address index) and must end inside the same extent's value
 * bytes; the extent's object must be in the right state. Anything else is
 * refused before a byte moves, so a forged or stale request can neither
 * scribble over a complete value nor read space that is free or being
 * written. A client that dies mid-write leaves its object pending: readers
 * never see it until PUT.END, and put-timeout lets another writer take over.
 *
 * Zero copy. A large SEG.WRITE payload is read from the socket straight into
 * the extent (the `bigarg` hook runs as soon as the payload's header is in,
 * with seg-id and offset already parsed), holding a reference on the object
 * so its extent cannot be freed under the read. A SEG.READ reply is queued
 * as a slice of the segment and written from there with writev, again
 * holding a reference until the bytes are out.
 *
 * The vector forms exist for batches of small values: a command per 4 KiB
 * value costs more in parsing and dispatch than its bytes do (mc_batch_put
 * over tcp ran at 0.63x MSET). Every range of one is checked before any byte
 * moves, so a refused vector changes nothing; their payloads are ordinary
 * arguments (the library sends large values with SEG.WRITE, in place).
 *
 * Tenancy. A user restricted by ACL key patterns (acl.c) may only move the
 * bytes of objects whose key it may access: every range's object is checked
 * against the user's patterns -- read for SEG.READ, write for SEG.WRITE --
 * by the key the object recorded when its put started (store.h). A range
 * of an object it may not touch gets the very error free space gets (the
 * refusal goes to ACL LOG for the server's users), and another tenant's
 * segment id the error of an id nobody has: a tenant probing offsets
 * cannot map where the others' objects sit. SHM.ATTACH would hand over the whole pool,
 * so a restricted user is refused it and uses these commands instead.
 *
 * Segments that client processes host are served by those processes (the
 * listener libmooncake runs), not here: for them the server knows the
 * layout but holds no bytes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "acl.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zmalloc.h"

#define DATA_ERR_WRITE "ERR range is not inside the extent of a pending object"
#define DATA_ERR_READ "ERR range is not inside the extent of a complete object"

/* Every refusal is logged (verbose): a forged or stale range is worth
 * knowing about, and a flood of them costs only the log level. */
static void dataRefused(client *c, const char *cmd, const char *err) {
    serverLog(LL_VERBOSE, "%s refused for client id=%llu addr=%s: %s", cmd, (unsigned long long)c->id,
              c->addr, err);
}

/* The local segment named by a seg-id argument, or NULL with *err set. A
 * segment c may not see (another tenant's) is "no such segment". */
static segment *dataSegment(client *c, sds arg, const char **err) {
    unsigned long long id;
    if (!string2ull(arg, sdslen(arg), &id)) {
        *err = "ERR segment id is not an unsigned integer";
        return NULL;
    }
    segment *s = segmentLookupId(id);
    if (s == NULL || !aclSegmentVisible(c, s)) {
        *err = "ERR no such segment";
        return NULL;
    }
    if (s->mem == NULL) {
        *err = "ERR segment is hosted by its owner, not this server: use its endpoints";
        return NULL;
    }
    return s;
}

/* The object whose extent holds [offset, offset+len) of the segment named by
 * segarg, in state `state`, that c's user may access; NULL with *err set.
 * *ptr gets the bytes. */
static storeObj *dataRange(client *c, sds segarg, sds offarg, unsigned long long len, int state, char **ptr,
                           const char **err) {
    const char *range_err = state == OBJ_PENDING ? DATA_ERR_WRITE : DATA_ERR_READ;
    segment *s = dataSegment(c, segarg, err);
    if (s == NULL) return NULL;
    unsigned long long off;
    if (!string2ull(offarg, sdslen(offarg), &off)) {
        *err = "ERR offset is not an unsigned integer";
        return NULL;
    }
    if (len == 0 || off >= s->size || len > s->size - off) {
        *err = range_err;
        return NULL;
    }
    uint32_t h = allocFind(s->alloc, off);
    storeObj *o = h == ALLOC_NONE ? NULL : allocUser(s->alloc, h);
    if (o && aclUserRestricted(c->user)) {
        sds key = o->ext ? o->ext->key : NULL; /* NULL: a SET value, read with GET */
        if (key == NULL ||
            !aclUserCanAccessKey(c->user, key, sdslen(key), state == OBJ_PENDING ? ACL_WRITE : ACL_READ)) {
            /* Logged for the server's users; the tenant gets what free
             * space would answer, so ranges map nothing of the others'. */
            aclLogDenialServerOnly(c, ACL_DENIED_KEY, key, key ? sdslen(key) : 0);
            *err = range_err;
            return NULL;
        }
    }
    if (o == NULL || o->state != state) {
        *err = range_err;
        return NULL;
    }
    uint64_t start = allocOffset(s->alloc, h);
    /* The value's bytes, not the extent's rounding: nobody writes past len. */
    if (off + len > start + o->len) {
        *err = range_err;
        return NULL;
    }
    *ptr = segmentPtr(s, off);
    return o;
}

/* The payload's header arrived (argument 3): place it or refuse it. */
char *segWriteBigArgProc(client *c, int argi, size_t len) {
    /* Only a well-formed SEG.WRITE may write: one with the wrong argument
     * count is refused after its bytes arrive, and must not have placed them. */
    if (argi != 3 || c->argc != 3 || c->expect_argc != 4) return NULL;
    /* Queued after MULTI: writing now would write before EXEC, or despite
     * a DISCARD. The payload goes to the heap and is copied when EXEC runs. */
    if (c->flags & CLIENT_MULTI) return NULL;
    char *ptr;
    const char *err;
    storeObj *o = dataRange(c, c->argv[1], c->argv[2], len, OBJ_PENDING, &ptr, &err);
    if (o == NULL) {
        c->argerr = err; /* the payload is read and dropped; the command replies err */
        dataRefused(c, "SEG.WRITE", err);
        return NULL;
    }
    storeObjIncrRef(o);
    c->argobj[argi] = o;
    server.stat_data_write_bytes += (long long)len;
    return ptr;
}

void segWriteCommand(client *c) {
    if (c->argobj && c->argobj[3]) {
        /* Already in place (segWriteBigArgProc): freeClientArgv drops the ref. */
        addReplyOk(c);
        return;
    }
    char *ptr;
    const char *err;
    storeObj *o = dataRange(c, c->argv[1], c->argv[2], sdslen(c->argv[3]), OBJ_PENDING, &ptr, &err);
    if (o == NULL) {
        dataRefused(c, "SEG.WRITE", err);
        addReplyError(c, err);
        return;
    }
    memcpy(ptr, c->argv[3], sdslen(c->argv[3]));
    server.stat_data_write_bytes += (long long)sdslen(c->argv[3]);
    addReplyOk(c);
}

void segReadCommand(client *c) {
    long long len;
    if (getLongLongFromObjectOrReply(c, c->argv[3], &len, "ERR length is not an integer") != C_OK) return;
    if (len <= 0) {
        addReplyError(c, DATA_ERR_READ);
        return;
    }
    char *ptr;
    const char *err;
    storeObj *o = dataRange(c, c->argv[1], c->argv[2], (unsigned long long)len, OBJ_COMPLETE, &ptr, &err);
    if (o == NULL) {
        dataRefused(c, "SEG.READ", err);
        addReplyError(c, err);
        return;
    }
    server.stat_data_read_bytes += len;
    addReplyPoolBytes(c, o, ptr, (size_t)len);
}

/* Ranges of a vector command: argv[2 + 2i] is an offset, argv[3 + 2i] a
 * payload (write) or a length (read). All or none: 1, or 0 with the refusal
 * replied. objs/ptrs/lens get one entry per range. */
static int dataRanges(client *c, const char *cmd, int write, storeObj **objs, char **ptrs, size_t *lens) {
    int n = (c->argc - 2) / 2;
    for (int i = 0; i < n; i++) {
        sds off = c->argv[2 + 2 * i], arg = c->argv[3 + 2 * i];
        const char *err;
        long long len = (long long)sdslen(arg);
        if (!write && (!string2ll(arg, sdslen(arg), &len) || len <= 0)) {
            addReplyErrorFormat(c, "%s (range %d: bad length)", DATA_ERR_READ, i);
            return 0;
        }
        objs[i] = dataRange(c, c->argv[1], off, (unsigned long long)len, write ? OBJ_PENDING : OBJ_COMPLETE, &ptrs[i],
                            &err);
        if (objs[i] == NULL) {
            dataRefused(c, cmd, err);
            addReplyErrorFormat(c, "%s (range %d)", err, i);
            return 0;
        }
        lens[i] = (size_t)len;
    }
    return 1;
}

/* SEG.WRITEV seg-id offset payload [offset payload ...] and SEG.READV
 * seg-id offset length [offset length ...]: every range checked, then all
 * written (+OK) or all read (an array, each element from the pool). */
static void segVectorCommand(client *c, int write) {
    if (c->argc % 2) {
        addReplyErrorFormat(c, "ERR wrong number of arguments for '%s' command", write ? "seg.writev" : "seg.readv");
        return;
    }
    int n = (c->argc - 2) / 2;
    storeObj **objs = zmalloc(sizeof(*objs) * (size_t)n);
    char **ptrs = zmalloc(sizeof(*ptrs) * (size_t)n);
    size_t *lens = zmalloc(sizeof(*lens) * (size_t)n);
    if (dataRanges(c, write ? "SEG.WRITEV" : "SEG.READV", write, objs, ptrs, lens)) {
        if (!write) addReplyArrayLen(c, n);
        for (int i = 0; i < n; i++) {
            if (write) {
                memcpy(ptrs[i], c->argv[3 + 2 * i], lens[i]);
                server.stat_data_write_bytes += (long long)lens[i];
            } else {
                server.stat_data_read_bytes += (long long)lens[i];
                addReplyPoolBytes(c, objs[i], ptrs[i], lens[i]);
            }
        }
        if (write) addReplyOk(c);
    }
    zfree(objs);
    zfree(ptrs);
    zfree(lens);
}

void segWritevCommand(client *c) { segVectorCommand(c, 1); }
void segReadvCommand(client *c) { segVectorCommand(c, 0); }

/* The fd goes with the reply's bytes (networking.c sends it with the next
 * write), so a client that sends SHM.ATTACH alone gets it with the reply. */
void shmAttachCommand(client *c) {
    if (!(c->flags & CLIENT_UNIX_SOCKET)) {
        dataRefused(c, "SHM.ATTACH", "not a unix socket connection");
        addReplyError(c, "ERR SHM.ATTACH needs a unix socket connection (the fd travels by SCM_RIGHTS)");
        return;
    }
    if (aclUserRestricted(c->user)) {
        dataRefused(c, "SHM.ATTACH", "the user is restricted by key patterns");
        aclLogDenial(c, ACL_DENIED_CMD, "shm.attach", 10);
        addReplyError(c, ACL_ERR_SHM_ATTACH);
        return;
    }
    const char *err;
    segment *s = dataSegment(c, c->argv[1], &err);
    if (s == NULL) {
        dataRefused(c, "SHM.ATTACH", err);
        addReplyError(c, err);
        return;
    }
    if (s->fd < 0) {
        addReplyError(c, "ERR segment has no shared memory file");
        return;
    }
    if (c->pass_fd >= 0) {
        addReplyError(c, "ERR an SHM.ATTACH reply is still being sent");
        return;
    }
    int fd = dup(s->fd);
    if (fd < 0) {
        addReplyErrorFormat(c, "ERR dup: %s", strerror(errno));
        return;
    }
    c->pass_fd = fd;
    addReplyArrayLen(c, 2);
    addReplyLongLong(c, (long long)s->id);
    addReplyLongLong(c, (long long)s->size);
    server.stat_shm_attach++;
}

/* The self segment advertises where its bytes can be reached: every TCP
 * listener and the unix socket, as a hosted segment lists its own. */
void dataPlaneSetSelfEndpoints(void) {
    segment *s = server.self;
    for (int j = 0; j < server.ipfd_count && s->nendpoints < SEGMENT_MAX_ENDPOINTS; j++) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof(sa);
        char ip[INET6_ADDRSTRLEN], uri[INET6_ADDRSTRLEN + 32];
        if (getsockname(server.ipfd[j], (struct sockaddr *)&sa, &salen) != 0) continue;
        if (sa.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&sa;
            inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
            snprintf(uri, sizeof(uri), "tcp://%s:%d", ip, ntohs(in->sin_port));
        } else if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
            inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
            snprintf(uri, sizeof(uri), "tcp://[%s]:%d", ip, ntohs(in6->sin6_port));
        } else {
            continue;
        }
        s->endpoints[s->nendpoints++] = zstrdup(uri);
    }
    if (server.sofd != -1 && s->nendpoints < SEGMENT_MAX_ENDPOINTS) {
        /* A relative unixsocket is relative to dir, our cwd; clients run elsewhere. */
        char uri[2 * PATH_MAX + 16], cwd[PATH_MAX];
        if (server.unixsocket[0] != '/' && getcwd(cwd, sizeof(cwd)))
            snprintf(uri, sizeof(uri), "unix://%s/%s", cwd, server.unixsocket);
        else
            snprintf(uri, sizeof(uri), "unix://%s", server.unixsocket);
        s->endpoints[s->nendpoints++] = zstrdup(uri);
    }
}
