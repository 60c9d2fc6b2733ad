/* mc_mount.c -- a handle that hosts a segment: mc_mount and its heartbeat.
 *
 * The memory is served by this process (mc_host.c: shm and tcp endpoints,
 * RDMA registration) and MOUNTed on the server under the handle's owner.
 * In a cluster, mc_mount cuts the memory into one slice per primary and
 * MOUNTs slice i on primary i (same listener, same endpoints, the slice's
 * BASE), so every shard can place replicas in this process's memory: a
 * writer's replicas can stay on its own host whichever shard owns the key.
 * The host serves each slice under its own segment id. Primaries that join
 * after the mount get no slice until the next mount.
 *
 * A hosting handle runs a heartbeat thread (HEARTBEAT to every node
 * holding a slice, reconnect, MOUNT again after -NEEDREMOUNT; after a
 * failover, MOUNT on the slot's new owner, which re-attaches the slice's
 * objects: sliceFollow): see heartbeatMain.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "mc_client.h"

#ifdef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE_COMPAT MADV_POPULATE_WRITE
#else
#define MADV_POPULATE_WRITE_COMPAT 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

/* ---- hosting a segment --------------------------------------------------- */

/* Sends slice i's stored MOUNT to its node; MC_OK with its id set, or
 * MC_ERR_*. Used by the first mount and by a remount after the node said
 * -NEEDREMOUNT. */
static int sendMount(mc_client *c, int i) {
    mcSlice *sl = &c->slices[i];
    mcReply *r;
    /* A new token for every MOUNT (a remount rotates it): the host takes
     * it before the server can hand it out, and the one it replaces until
     * the MOUNT is answered (mc_host.c). */
    for (int a = 3; a + 1 < sl->argc; a += 2) { /* option, value pairs */
        if (strcmp(sl->argv[a], "TOKEN")) continue;
        char tok[33];
        unsigned char raw[16];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
            return mcErr(c, MC_ERR_IO, "getrandom: %s", strerror(errno));
        for (int b = 0; b < 16; b++) snprintf(tok + 2 * b, 3, "%02x", raw[b]);
        if (strlen(sl->argv[a + 1]) >= 32) memcpy(sl->argv[a + 1], tok, 33);
        else {
            char *t = strdup(tok);
            if (t == NULL) return mcErr(c, MC_ERR_NOMEM, "out of memory");
            free(sl->argv[a + 1]);
            sl->argv[a + 1] = t;
        }
        mcHostSetSegmentToken(c->host, i, tok);
        break;
    }
    int rc = mcNodeCommand(c, sl->node, 0, sl->argc, (const char **)sl->argv, NULL, &r);
    if (rc != MC_OK) return rc;
    if (r->type != MCR_INT || r->integer <= 0) {
        rc = r->type == MCR_INT ? mcErr(c, MC_ERR_PROTOCOL, "MOUNT answered %lld", r->integer) : mcErrReply(c, r);
        mcReplyFree(r);
        return rc;
    }
    long long id = r->integer;
    mcReplyFree(r);
    /* The host tells slices apart by id; ids from different nodes are
     * drawn from per-node random bases, so a clash is a broken server. */
    for (int j = 0; j < c->nslices; j++)
        if (j != i && c->slices[j].id == id)
            return mcErr(c, MC_ERR_PROTOCOL, "two nodes gave segment id %lld to slices of one mount", id);
    sl->id = id;
    mcHostSetSegmentId(c->host, i, (uint64_t)id);
    /* mc_mount_id: the slice on the node the handle was given, else the first. */
    c->host_id = MC_ERR_NOT_FOUND;
    for (int j = 0; j < c->nslices; j++) {
        if (c->slices[j].id <= 0) continue;
        if (c->host_id <= 0 || c->slices[j].node == 0) c->host_id = c->slices[j].id;
        if (c->slices[j].node == 0) break;
    }
    return MC_OK;
}

/* Slice i's node cannot be reached, or no longer takes the MOUNT (a
 * replica now answers -READONLY): after a failover the slot it served has
 * a new owner, the promoted replica, which holds the slice's segment and
 * objects detached, as a restarted server holds those of its log. The map
 * (from another node) names that owner; the slice is mounted there with
 * the MOUNT it had -- same name, owner, size and IDENTITY -- so the
 * objects come back where they are, nothing put again. Nothing moves
 * while the map still names the old node (the failover is not done). */
static void sliceFollow(mc_client *c, int i) {
    mcSlice *sl = &c->slices[i];
    if (!c->cluster || sl->slot < 0) return;
    mcRefreshMapFrom(c, -1, sl->node, 0);
    int to = mcRouteSlot(c, (unsigned)sl->slot);
    /* A failover takes all of the old node's slots; a node that still
     * serves some only lost that one to a migration, and its slice stays. */
    if (c->map.slots == NULL || c->map.slots[sl->slot] == MC_NO_NODE || to == sl->node ||
        c->map.nodes[sl->node].primary)
        return;
    for (int j = 0; j < c->nslices; j++)
        if (j != i && c->slices[j].node == to) return; /* one slice per node: that one stays where it is */
    sl->node = to;
    sendMount(c, i); /* a failure is tried again at the next beat (HEARTBEAT: -NEEDREMOUNT) */
}

/* A beat for slice i on its node: HEARTBEAT (reconnecting if the
 * connection broke), and MOUNT again if the node already let the owner go
 * (-NEEDREMOUNT: the old segment and its objects are gone, the new one gets
 * a new id; after a restart, the same id and objects, re-attached). A node
 * that cannot be reached or refuses the MOUNT may have lost the slot to a
 * failover: the slice follows it (sliceFollow). Errors are left for the
 * next beat. */
static void heartbeatSlice(mc_client *c, int i) {
    mcSlice *sl = &c->slices[i];
    if (sl->argc < 2) return;
    mcConn *conn = c->map.nodes[sl->node].conn;
    if ((conn == NULL || conn->broken) && mcNodeReconnect(c, sl->node) != 0) {
        sliceFollow(c, i);
        return;
    }
    conn = c->map.nodes[sl->node].conn;
    const char *argv[2] = {"HEARTBEAT", sl->argv[sl->argc - 1]}; /* OWNER is last */
    mcReply *r = mcConnCommand(conn, 2, argv, NULL);
    int remount = r && mcReplyIsError(r, "NEEDREMOUNT"), lost = r == NULL;
    mcReplyFree(r);
    if ((remount && sendMount(c, i) != MC_OK) || lost) sliceFollow(c, i);
}

/* Every slice mounted on node (called after its connection was reopened). */
void mcHeartbeatNode(mc_client *c, int node) {
    c->hb_active = 1; /* a reconnect from within does not beat again */
    for (int i = 0; i < c->nslices; i++)
        if (c->slices[i].node == node) heartbeatSlice(c, i);
    c->hb_active = 0;
}

static void heartbeatLocked(mc_client *c) {
    if (c->host == NULL) return;
    c->hb_active = 1;
    for (int i = 0; i < c->nslices; i++) heartbeatSlice(c, i);
    c->hb_active = 0;
}

#define MC_HEARTBEAT_MS 1000

/* A beat every MC_HEARTBEAT_MS. The handle's lock is only tried: a call in
 * progress is traffic on the handle already, and the thread must never wait
 * on the lock that mcUnmountLocked holds while it joins the thread. */
static void *heartbeatMain(void *arg) {
    mc_client *c = arg;
    pthread_mutex_lock(&c->hb_lock);
    while (!c->hb_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(MC_HEARTBEAT_MS % 1000) * 1000000L;
        ts.tv_sec += MC_HEARTBEAT_MS / 1000 + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&c->hb_cond, &c->hb_lock, &ts);
        if (c->hb_stop) break;
        pthread_mutex_unlock(&c->hb_lock);
        if (mcTryLockInternal(c) == 0) {
            heartbeatLocked(c);
            pthread_mutex_unlock(&c->lock);
        }
        pthread_mutex_lock(&c->hb_lock);
    }
    pthread_mutex_unlock(&c->hb_lock);
    return NULL;
}

static void heartbeatStop(mc_client *c) {
    if (!c->hb_running) return;
    pthread_mutex_lock(&c->hb_lock);
    c->hb_stop = 1;
    pthread_cond_signal(&c->hb_cond);
    pthread_mutex_unlock(&c->hb_lock);
    pthread_join(c->hb_thread, NULL);
    c->hb_running = 0;
    c->hb_stop = 0;
}

void mcUnmountLocked(mc_client *c) {
    heartbeatStop(c);
    for (int i = 0; i < c->nslices; i++) {
        mcSlice *sl = &c->slices[i];
        mcConn *conn = c->map.nodes[sl->node].conn;
        /* Only what this handle mounted: a name another owner holds
         * (-EXISTS) is not ours to unmount. */
        if (sl->id > 0 && c->host_name && conn && !conn->broken) {
            const char *argv[2] = {"UNMOUNT", c->host_name};
            mcReply *r = mcConnCommand(conn, 2, argv, NULL);
            mcReplyFree(r);
        }
        for (int j = 0; j < sl->argc; j++) free(sl->argv[j]);
    }
    free(c->slices);
    c->slices = NULL;
    c->nslices = 0;
    /* The listener stops (and its threads finish) before the memory goes. */
    mcHostStop(c->host);
    c->host = NULL;
    if (c->host_rdma) mcRdmaUnregister(c->rdma, c->host_mem); /* only what the mount registered */
    c->host_rdma = 0;
    if (c->host_owned && c->host_mem) munmap(c->host_mem, c->host_size);
    if (c->host_fd >= 0) close(c->host_fd);
    c->host_fd = -1;
    c->host_mem = NULL;
    free(c->host_name);
    c->host_name = NULL;
    c->host_id = MC_ERR_NOT_FOUND;
}

static int firstSlotCompare(const void *a, const void *b, void *arg) {
    const mcMap *m = arg;
    int x = m->nodes[*(const int *)a].first_slot, y = m->nodes[*(const int *)b].first_slot;
    return (x > y) - (x < y);
}

/* The nodes that get a slice: the one server, or every primary of the
 * cluster in slot order. Their count, or MC_ERR_*. */
static int mountNodes(mc_client *c, int *nodes) {
    if (!c->cluster) {
        nodes[0] = 0;
        return 1;
    }
    mcRefreshMap(c, 0, 1);
    int n = 0;
    for (int i = 0; i < c->map.nnodes && n < MC_HOST_MAX_SLICES; i++)
        if (c->map.nodes[i].primary) nodes[n++] = i;
    if (n == 0) return mcErr(c, MC_ERR_SERVER, "the cluster serves no slots yet: no node to mount on");
    qsort_r(nodes, (size_t)n, sizeof(*nodes), firstSlotCompare, &c->map);
    return n;
}

/* The name a segment is mounted under: `name`, except that a name ending
 * in ":0" gets the port of the segment's TCP listener (tcp_ep) in place
 * of the 0, as binding port 0 picks a port. Processes on one host that
 * all pass the same hostname (tensor-parallel ranks) so get names of
 * their own, in the host:port form Mooncake's clients use. */
static char *mountName(const char *name, const char *tcp_ep) {
    size_t len = strlen(name);
    const char *colon = strrchr(tcp_ep, ':');
    if (len < 2 || strcmp(name + len - 2, ":0") || colon == NULL) return strdup(name);
    char *out = malloc(len + 8);
    if (out) snprintf(out, len + 8, "%.*s:%s", (int)(len - 2), name, colon + 1);
    return out;
}

static int mountLocked(mc_client *c, void *buf, size_t size, const char *name) {
    char err[256];
    int rc;
    if (size == 0 || name == NULL || name[0] == '\0') return mcErr(c, MC_ERR_INVALID, "mount needs a size and a name");
    if (c->host) return mcErr(c, MC_ERR_EXISTS, "this handle already hosts segment '%s'", c->host_name);
    int *nodes = malloc(MC_HOST_MAX_SLICES * sizeof(*nodes));
    size_t *off = malloc(MC_HOST_MAX_SLICES * sizeof(*off)), *len = malloc(MC_HOST_MAX_SLICES * sizeof(*len));
    if (!nodes || !off || !len) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto out;
    }
    int n = mountNodes(c, nodes);
    if (n < 0) {
        rc = n;
        goto out;
    }
    /* One slice per node: equal, aligned, each at least the 4 KiB a
     * segment must have. */
    if (n == 1) {
        off[0] = 0;
        len[0] = size;
    } else if (mcSlicePlan(size, n, mcSliceAlign(size / (size_t)n), 4096, off, len) != 0) {
        rc = mcErr(c, MC_ERR_INVALID, "%zu bytes cannot be cut into %d aligned slices of at least 4 KiB", size, n);
        goto out;
    }
    if ((c->slices = calloc((size_t)n, sizeof(*c->slices))) == NULL) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto out;
    }
    c->nslices = n;
    for (int i = 0; i < n; i++) {
        c->slices[i].node = nodes[i];
        c->slices[i].slot = c->cluster ? c->map.nodes[nodes[i]].first_slot : -1;
        c->slices[i].off = off[i];
        c->slices[i].size = len[i];
    }
    c->host_size = size;
    if (buf == NULL) {
        c->host_fd = memfd_create("mooncake-segment", MFD_CLOEXEC);
        if (c->host_fd < 0 || ftruncate(c->host_fd, (off_t)size) != 0) {
            rc = mcErr(c, MC_ERR_NOMEM, "memfd of %zu bytes: %s", size, strerror(errno));
            goto err;
        }
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c->host_fd, 0);
        if (m == MAP_FAILED) {
            rc = mcErr(c, MC_ERR_NOMEM, "mmap of %zu bytes: %s", size, strerror(errno));
            goto err;
        }
        madvise(m, size, MADV_HUGEPAGE); /* where shmem THP is allowed; ignored elsewhere */
        c->host_mem = m;
        c->host_owned = 1;
    } else {
        /* The caller's memory: fault it in now, writable, so the first
         * transfers into it are not paced by page faults (content is kept;
         * memory that cannot be populated, e.g. device-mapped, is left as is). */
        madvise(buf, size, MADV_POPULATE_WRITE_COMPAT);
        c->host_mem = buf;
        c->host_owned = 0;
    }
    /* Listen where the server sees us: our end of the connection to
     * nodes[0] (every node of a cluster is told the same endpoints). */
    char bindip[64] = "127.0.0.1";
    mcConn *seed = mcNodeConn(c, 0);
    if (seed && !seed->is_unix) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof(sa);
        if (getsockname(seed->fd, (struct sockaddr *)&sa, &salen) == 0) mcHostAddrString(&sa, bindip, sizeof(bindip));
    }
    c->host = mcHostStart(c->host_mem, size, c->host_fd, n, off, len, bindip, c->host_port_min, c->host_port_max,
                          c->user, c->password, err, sizeof(err));
    if (c->host == NULL) {
        rc = mcErr(c, MC_ERR_IO, "segment listener: %s", err);
        goto err;
    }
    char eps[4][300], rkeys[512], rdmaep[300] = "";
    int neps = mcHostEndpoints(c->host, eps, 4);
    if ((c->host_name = mountName(name, eps[0])) == NULL) {
        rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
        goto err;
    }
    name = c->host_name;
    if (mcClientRdma(c) && mcRdmaRegister(c->rdma, c->host_mem, size, rkeys, sizeof(rkeys)) == MC_OK) {
        int port = 0;
        c->host_rdma = 1;
        if (mcRdmaListen(c->rdma, bindip, &port, err, sizeof(err)) == MC_OK)
            snprintf(rdmaep, sizeof(rdmaep), "rdma://%s:%d", bindip, port);
    }
    char hostname[256] = "localhost", owner[400];
    int have_hostname = gethostname(hostname, sizeof(hostname)) == 0;
    hostname[sizeof(hostname) - 1] = '\0';
    /* A named owner, not the connection: it outlives a reconnect (within
     * owner-ttl) and the heartbeat thread speaks for it. Kept last. */
    snprintf(owner, sizeof(owner), "mc:%s:%ld:%s", hostname, (long)getpid(), name);
    /* Drawn once for this memory and kept by this process alone: a server
     * restarted from its log re-attaches the objects it held here only to
     * a MOUNT that presents it again (the heartbeat's remount does), so a
     * new process under the same name (pid 1 in a container) is never
     * taken for this one. */
    char identity[33];
    unsigned char idraw[16];
    if (getrandom(idraw, sizeof(idraw), 0) != (ssize_t)sizeof(idraw)) {
        rc = mcErr(c, MC_ERR_IO, "getrandom: %s", strerror(errno));
        goto err;
    }
    for (int b = 0; b < 16; b++) snprintf(identity + 2 * b, 3, "%02x", idraw[b]);
    for (int i = 0; i < n; i++) {
        mcSlice *sl = &c->slices[i];
        char sizebuf[24], basebuf[24];
        const char *argv[32];
        int argc = 0;
        mcFmtU64(sizebuf, sizeof(sizebuf), sl->size);
        argv[argc++] = "MOUNT";
        argv[argc++] = name;
        argv[argc++] = sizebuf;
        for (int e = 0; e < neps; e++) {
            argv[argc++] = "ENDPOINT";
            argv[argc++] = eps[e];
        }
        if (rdmaep[0]) { /* one registration; each slice's own BASE */
            mcFmtU64(basebuf, sizeof(basebuf), (uint64_t)(uintptr_t)(c->host_mem + sl->off));
            argv[argc++] = "ENDPOINT";
            argv[argc++] = rdmaep;
            argv[argc++] = "BASE";
            argv[argc++] = basebuf;
            argv[argc++] = "RKEY";
            argv[argc++] = rkeys;
        }
        if (have_hostname) {
            argv[argc++] = "HOST";
            argv[argc++] = hostname;
        }
        argv[argc++] = "IDENTITY";
        argv[argc++] = identity;
        /* Its value is drawn afresh at each MOUNT (sendMount). */
        argv[argc++] = "TOKEN";
        argv[argc++] = "-";
        argv[argc++] = "OWNER";
        argv[argc++] = owner;
        for (int a = 0; a < argc; a++) {
            if ((sl->argv[a] = strdup(argv[a])) == NULL) {
                rc = mcErr(c, MC_ERR_NOMEM, "out of memory");
                goto err;
            }
            sl->argc = a + 1;
        }
        if ((rc = sendMount(c, i)) != MC_OK) goto err;
    }
    if (pthread_create(&c->hb_thread, NULL, heartbeatMain, c) == 0) c->hb_running = 1;
    rc = MC_OK;
    goto out;
err:
    mcUnmountLocked(c); /* UNMOUNTs only the slices that were mounted */
out:
    free(nodes);
    free(off);
    free(len);
    return rc;
}

int mc_mount(mc_client *c, size_t size, const char *name) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    int rc = mountLocked(c, NULL, size, name);
    mcUnlock(c);
    return rc;
}

int mc_mount_buffer(mc_client *c, void *buf, size_t size, const char *name) {
    if (mcHandleBad(c) || buf == NULL) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    int rc = mountLocked(c, buf, size, name);
    mcUnlock(c);
    return rc;
}

int mc_unmount(mc_client *c) {
    if (mcHandleBad(c)) return MC_ERR_INVALID;
    if (mcLock(c) != MC_OK) return MC_ERR_INVALID;
    int rc = c->host ? MC_OK : MC_ERR_NOT_FOUND;
    mcUnmountLocked(c);
    mcUnlock(c);
    return rc;
}

long long mc_mount_id(mc_client *c) { return mcHandleBad(c) ? MC_ERR_INVALID : c->host_id; }

const char *mc_mount_name(mc_client *c) { return !mcHandleBad(c) && c->host ? c->host_name : NULL; }

