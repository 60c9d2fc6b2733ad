/* t_segment.c -- MOUNT, UNMOUNT, SEGMENTS, SEGMENT.INFO, HEARTBEAT.
 *
 * A client process contributes memory by MOUNTing it: the server records
 * the segment's description (SPEC §3) and from then on hands out places in
 * it; the client serves the bytes (shm, TCP or RDMA). MOUNT is idempotent
 * for the same name, owner and size, so a client that lost its connection
 * simply mounts again and gets the same id; the same name under another
 * owner is refused (-EXISTS), because two processes claiming one name is a
 * configuration error that must not silently merge their memory. When the
 * holder has no open connection the claimant is most likely its restarted
 * successor: the refusal says so and sets off a probe of the holder's host
 * (owner.c), so a retry succeeds as soon as the old process is known to be
 * gone. Refusing and letting the client retry keeps MOUNT a command that
 * never waits; a MOUNT parked until a probe ends would need a blocked-client
 * state for one rare race (a restart is seconds, a probe milliseconds).
 *
 * UNMOUNT is immediate (replicas on the segment are dropped; objects left
 * without a replica disappear) or GRACEFUL ms: the segment stops receiving
 * new allocations at once, stays readable, and is unmounted when the time
 * is up (segmentCron).
 *
 * Tokens. Each MOUNT (an idempotent one too) gives the segment a new token,
 * the capability its host admits peers by: the one the host proposed
 * (TOKEN), so that it knows it before anyone can be handed it, or one drawn
 * here. SEGMENT.TOKEN hands it to users who may see the segment, and the
 * server's relayed reads present it (migrate.c). A remount revokes it.
 *
 * Tenants (acl.c). A segment or an owner created by a user restricted by ACL
 * key patterns belongs to that user. Such a user sees (SEGMENTS,
 * SEGMENT.INFO) only its own segments and the shared ones (the pool,
 * segments of unrestricted users), unmounts only its own; segment and
 * owner names are per tenant (aclLookupSegment, owner.c), so others'
 * segments and owners look to it as if they did not exist, and a shared
 * segment shows it its capacity, not how full the others made it.
 * Unrestricted users see and manage everything, as before.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "acl.h"
#include "anet.h"
#include "aof.h"
#include "cluster.h"
#include "detached.h"
#include "owner.h"
#include "sha256.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zerofree.h"
#include "zmalloc.h"

#define SEGMENT_MIN_SIZE 4096ULL
#define SEGMENT_MAX_SIZE (1ULL << 50) /* 1 PiB */

/* Takes the segment out of the table and frees it; its replicas become
 * stale at once (store.h) and the reaper removes them in bounded slices.
 * Returns the number of replicas dropped. */
/* The draining segments, a binary min-heap by drain deadline, so the cron
 * looks at the ones whose time has come and one more, not at the table:
 * it walked every slot each tick while any drain ran (65535 with a full
 * table; DEBUG VISITS cron-segments). */
static struct {
    segment **v;
    uint32_t n, cap;
} drains;

static void drainPlace(uint32_t i, segment *s) {
    drains.v[i] = s;
    s->drain_index = i;
}

static void drainUp(uint32_t i) {
    segment *s = drains.v[i];
    while (i > 0 && drains.v[(i - 1) / 2]->drain_deadline_ms > s->drain_deadline_ms) {
        drainPlace(i, drains.v[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    drainPlace(i, s);
}

static void drainDown(uint32_t i) {
    segment *s = drains.v[i];
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        long long best = s->drain_deadline_ms;
        if (l < drains.n && drains.v[l]->drain_deadline_ms < best) m = l, best = drains.v[l]->drain_deadline_ms;
        if (l + 1 < drains.n && drains.v[l + 1]->drain_deadline_ms < best) m = l + 1;
        if (m == i) break;
        drainPlace(i, drains.v[m]);
        i = m;
    }
    drainPlace(i, s);
}

static void drainAdd(segment *s) {
    if (drains.n == drains.cap) {
        drains.cap = drains.cap ? drains.cap * 2 : 16;
        drains.v = zrealloc(drains.v, sizeof(segment *) * drains.cap);
    }
    drainPlace(drains.n++, s);
    drainUp(s->drain_index);
}

static void drainRemove(segment *s) {
    uint32_t i = s->drain_index;
    segment *last = drains.v[--drains.n];
    if (i == drains.n) return;
    drainPlace(i, last);
    drainDown(i);
    drainUp(last->drain_index);
}

uint64_t segmentUnmount(segment *s) {
    if (s->state == SEG_DRAINING) drainRemove(s);
    /* The zeroing thread must be done with a segment mapped here before it
     * is unmapped (the pool itself is never unmounted). */
    if (s->mem) zerofreeReclaim(1);
    uint64_t dropped = segmentObjects(s); /* every live extent is a replica that goes */
    aofSegmentGone(s);
    if (s->state == SEG_DETACHED) detachedSegmentGone(s); /* what the log held there goes too */
    ownerSegmentRemoved(s);
    segmentTableRemove(s);
    segmentRelease(s);
    storeReapStaleReplicas(); /* after the removal: its replicas are stale now */
    return dropped;
}

/* Decimal, or hexadecimal with 0x: never octal, so "010" is ten. */
static int parseU64(const char *s, uint64_t *out) {
    int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const char *digits = hex ? s + 2 : s;
    if (!*digits || *digits == '-' || *digits == '+' || *digits == ' ') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(digits, &end, hex ? 16 : 10);
    if (*end || errno) return 0;
    *out = v;
    return 1;
}

static int validName(sds name) {
    if (sdslen(name) == 0 || sdslen(name) > SEGMENT_NAME_MAX) return 0;
    for (size_t i = 0; i < sdslen(name); i++)
        if (name[i] <= ' ' || name[i] > '~') return 0;
    return 1;
}

/* Commands take a segment by name or id, so a name made of digits would
 * shadow the segment with that id. */
static int validSegmentName(sds name) {
    if (!validName(name)) return 0;
    for (size_t i = 0; i < sdslen(name); i++)
        if (name[i] < '0' || name[i] > '9') return 1;
    return 0;
}

static int validEndpoint(sds uri) {
    if (sdslen(uri) > 1024) return 0;
    return !strncmp(uri, "tcp://", 6) || !strncmp(uri, "unix://", 7) || !strncmp(uri, "rdma://", 7);
}

/* Whether the process mounting from c runs on this machine, so that its
 * unix:// and loopback endpoints are its own (owner.c probes them): c came
 * over the unix socket or from a local address, and the HOST it names, if
 * any, is this machine's name. The name rules out what a local address
 * alone would not: a client behind an SSH tunnel, or in a container that
 * shares the server's unix socket but not its network namespace (abstract
 * socket names are per namespace). */
static int mountIsSameHost(client *c, sds host, const char *peer) {
    static char hostname[256];
    if (hostname[0] == '\0' && gethostname(hostname, sizeof(hostname) - 1) != 0)
        snprintf(hostname, sizeof(hostname), "?"); /* then only HOST-less mounts count as ours */
    if (host && strcmp(host, "localhost") && strcmp(host, hostname)) return 0;
    if (c->flags & CLIENT_UNIX_SOCKET) return 1;
    char local[NET_IP_STR_LEN];
    if (peer == NULL || anetFdToString(c->fd, local, sizeof(local), NULL, 0) == -1) return 0;
    return anetPeerIsLocal(peer, local);
}

/* A segment token: hexadecimal, long enough not to be guessed. */
static int validToken(sds t) {
    if (sdslen(t) < SEGMENT_TOKEN_MIN || sdslen(t) > SEGMENT_TOKEN_MAX) return 0;
    for (size_t i = 0; i < sdslen(t); i++)
        if (!isxdigit((unsigned char)t[i])) return 0;
    return 1;
}

/* What a segment keeps of a MOUNT's IDENTITY: its SHA-256, so neither the
 * log nor a core dump holds what would let another process pass for the
 * host. Hex digits are compared case-blind. */
static char *identityHash(sds id) {
    char low[SEGMENT_TOKEN_MAX];
    size_t n = sdslen(id);
    for (size_t i = 0; i < n; i++) low[i] = (char)tolower((unsigned char)id[i]);
    unsigned char d[SHA256_DIGEST_LEN];
    char hex[SHA256_HEX_LEN + 1];
    sha256(low, n, d);
    sha256Hex(d, hex);
    return zstrdup(hex);
}

/* s's token becomes the one its host proposed, or one drawn here. */
static void segmentSetToken(segment *s, sds proposed) {
    char drawn[SEGMENT_TOKEN_MIN + 1];
    if (proposed == NULL) {
        getRandomHexChars(drawn, SEGMENT_TOKEN_MIN);
        drawn[SEGMENT_TOKEN_MIN] = '\0';
    }
    zfree(s->token);
    s->token = zstrdup(proposed ? proposed : drawn);
}

/* The address a TCP connection came from, NULL otherwise. */
static char *mountPeer(client *c) {
    char peer[NET_IP_STR_LEN];
    if ((c->flags & CLIENT_UNIX_SOCKET) || c->fd == -1 || anetFdToString(c->fd, peer, sizeof(peer), NULL, 1) == -1)
        return NULL;
    return zstrdup(peer);
}

/* The owner named, created for tenant if new (a tenant's owner is its own). */
static owner *mountOwner(const char *oname, const char *tenant) { return ownerGetOrCreate(tenant, oname); }

/* The fields a MOUNT describes a remote segment by; the host's address
 * and endpoints may have changed since the log recorded them. */
static void segmentDescribe(segment *s, client *c, sds host, sds *endpoints, int nendpoints, uint64_t base,
                            sds rkey, int tier) {
    s->tier = tier;
    s->base = base;
    zfree(s->rkey);
    s->rkey = rkey ? zstrdup(rkey) : NULL;
    char *h = zstrdup(host ? host : (c->flags & CLIENT_UNIX_SOCKET) ? "localhost" : c->addr);
    if (!host && !(c->flags & CLIENT_UNIX_SOCKET)) {
        char *colon = strrchr(h, ':'); /* keep the address, drop the port */
        if (colon) *colon = '\0';
    }
    segmentSetHost(s, h);
    for (int i = 0; i < s->nendpoints; i++) zfree(s->endpoints[i]);
    for (int i = 0; i < nendpoints; i++) s->endpoints[i] = zstrdup(endpoints[i]);
    s->nendpoints = nendpoints;
    zfree(s->peer_ip);
    s->peer_ip = mountPeer(c);
    s->same_host = mountIsSameHost(c, host, s->peer_ip);
}

/* The owner of a segment loaded from the log mounted it again and proved
 * the memory is the one its objects were written to: they are objects
 * again, at the offsets they had (detached.c). */
static void mountReattach(client *c, segment *s, sds token, sds host, sds *endpoints, int nendpoints, uint64_t base,
                          sds rkey, int tier) {
    segmentDescribe(s, c, host, endpoints, nendpoints, base, rkey, tier);
    s->state = SEG_ACTIVE;
    s->mounted_ms = mstime();
    owner *o = s->ownerp;
    o->ndetached--;
    ownerSegmentRemoved(s); /* the probe's endpoint is chosen again from what it says now */
    ownerSegmentAdded(o, s);
    ownerAttachClient(o, c);
    segmentSetToken(s, token);
    aofSegmentMounted(s);
    unsigned long n = detachedAttach(s);
    serverLog(LL_NOTICE, "Segment '%s' (id %llu) re-attached: its owner %s proved the same memory; %lu objects "
                         "from the log are readable again",
              s->name, (unsigned long long)s->id, s->owner, n);
    addReplyLongLong(c, (long long)s->id);
}

static char *dupStr(aofStr v) {
    if (v.p == NULL) return NULL;
    char *d = zmalloc(v.len + 1);
    memcpy(d, v.p, v.len);
    d[v.len] = '\0';
    return d;
}

int segmentRestoreFromLog(const aofSegment *g) {
    char name[SEGMENT_NAME_MAX + 1], oname[SEGMENT_NAME_MAX + 1];
    if (g->name.len > SEGMENT_NAME_MAX || g->owner.len > SEGMENT_NAME_MAX) return -1;
    memcpy(name, g->name.p, g->name.len);
    name[g->name.len] = '\0';
    memcpy(oname, g->owner.p, g->owner.len);
    oname[g->owner.len] = '\0';
    if (!strcmp(name, server.self->name)) return -1; /* never the pool's name */
    char *tenant = dupStr(g->tenant);
    /* A later record of the segment (its re-attach after an earlier
     * restart) replaces the earlier; a name is one segment's. */
    segment *old = segmentLookupId(g->id);
    if (old) segmentUnmount(old);
    for (segment *t = segmentNamed(name); t; t = t->name_next) {
        if (t->id != SEGMENT_SELF_ID &&
            ((t->tenant == NULL && tenant == NULL) || (t->tenant && tenant && !strcmp(t->tenant, tenant)))) {
            segmentUnmount(t);
            break;
        }
    }
    segment *s = segmentCreateRemote(name, g->size, oname);
    if (s == NULL) {
        zfree(tenant);
        return -1;
    }
    s->tier = g->tier;
    s->tenant = tenant;
    s->base = g->base;
    s->rkey = dupStr(g->rkey);
    segmentSetHost(s, dupStr(g->host));
    s->peer_ip = dupStr(g->peer_ip);
    s->same_host = g->same_host;
    s->identity = dupStr(g->identity);
    for (int i = 0; i < g->nendpoints; i++) s->endpoints[i] = dupStr(g->endpoints[i]);
    s->nendpoints = g->nendpoints;
    s->mounted_ms = g->mounted_ms;
    s->state = SEG_DETACHED;
    if (segmentTableAddWithId(s, g->id) != 0) {
        segmentRelease(s);
        return -1;
    }
    owner *o = ownerGetOrCreate(tenant, oname);
    ownerSegmentAdded(o, s);
    o->ndetached++;
    ownerRestored(o);
    return 0;
}

void mountCommand(client *c) {
    sds name = c->argv[1];
    uint64_t size;
    int err;
    long long ll = memtoll(c->argv[2], &err);
    if (err || ll <= 0) {
        addReplyError(c, "ERR invalid segment size");
        return;
    }
    size = (uint64_t)ll;
    if (size < SEGMENT_MIN_SIZE || size > SEGMENT_MAX_SIZE) {
        addReplyErrorFormat(c, "ERR segment size must be between %llu and %llu bytes",
                            SEGMENT_MIN_SIZE, SEGMENT_MAX_SIZE);
        return;
    }
    if (!validSegmentName(name)) {
        addReplyError(c, "ERR invalid segment name (1..256 printable characters, no spaces, not all digits)");
        return;
    }
    /* Parse everything before changing anything. */
    sds endpoints[SEGMENT_MAX_ENDPOINTS];
    int nendpoints = 0, tier = SEG_TIER_MEMORY;
    uint64_t base = 0;
    sds rkey = NULL, host = NULL, ownername = NULL, token = NULL, identity = NULL;
    for (int j = 3; j < c->argc; j++) {
        const char *opt = c->argv[j];
        if (j + 1 >= c->argc) {
            addReplyErrorSyntax(c);
            return;
        }
        sds val = c->argv[++j];
        if (!strcasecmp(opt, "endpoint")) {
            if (nendpoints == SEGMENT_MAX_ENDPOINTS) {
                addReplyErrorFormat(c, "ERR at most %d endpoints", SEGMENT_MAX_ENDPOINTS);
                return;
            }
            if (!validEndpoint(val)) {
                addReplyError(c, "ERR endpoint must be tcp://host:port, unix:///path or rdma://host:port");
                return;
            }
            endpoints[nendpoints++] = val;
        } else if (!strcasecmp(opt, "base")) {
            if (!parseU64(val, &base)) {
                addReplyError(c, "ERR invalid BASE address");
                return;
            }
        } else if (!strcasecmp(opt, "rkey")) {
            if (sdslen(val) == 0 || sdslen(val) > 256) {
                addReplyError(c, "ERR invalid RKEY");
                return;
            }
            rkey = val;
        } else if (!strcasecmp(opt, "tier")) {
            if ((tier = segmentTierFromName(val)) < 0) {
                addReplyError(c, "ERR TIER must be memory, disk or vram");
                return;
            }
        } else if (!strcasecmp(opt, "host")) {
            if (sdslen(val) == 0 || sdslen(val) > 256) {
                addReplyError(c, "ERR invalid HOST");
                return;
            }
            host = val;
        } else if (!strcasecmp(opt, "token")) {
            if (!validToken(val)) {
                addReplyErrorFormat(c, "ERR invalid TOKEN (%d..%d hexadecimal digits)", SEGMENT_TOKEN_MIN,
                                    SEGMENT_TOKEN_MAX);
                return;
            }
            token = val;
        } else if (!strcasecmp(opt, "identity")) {
            if (!validToken(val)) {
                addReplyErrorFormat(c, "ERR invalid IDENTITY (%d..%d hexadecimal digits)", SEGMENT_TOKEN_MIN,
                                    SEGMENT_TOKEN_MAX);
                return;
            }
            identity = val;
        } else if (!strcasecmp(opt, "owner")) {
            if (!validName(val)) {
                addReplyError(c, "ERR invalid OWNER (1..256 printable characters, no spaces)");
                return;
            }
            ownername = val;
        } else {
            addReplyErrorSyntax(c);
            return;
        }
    }
    char defowner[32];
    if (ownername == NULL) {
        snprintf(defowner, sizeof(defowner), "client:%llu", (unsigned long long)c->id);
    }
    const char *oname = ownername ? ownername : defowner;
    const char *tenant = aclSegmentTenantFor(c); /* owner names are per tenant (owner.c) */

    segment *existing = aclLookupSegment(c, name);
    if (existing) {
        if (existing->state == SEG_DRAINING) {
            addReplyErrorFormat(c, "-EXISTS segment '%s' is being unmounted (GRACEFUL): mount it again once it is gone",
                                name);
            return;
        }
        owner *holder = existing->ownerp;
        if (holder && holder->nconns == 0 && strcmp(existing->owner, oname)) {
            /* Most likely a restarted process taking its predecessor's
             * name: the probe finds out whether the old one is gone. */
            int probing = ownerProbeAgain(holder);
            addReplyErrorFormat(c, "-EXISTS segment '%s' is mounted by another owner, which has no open connection: %s",
                                name,
                                probing ? "its host is being probed; if it is gone the name is free in a moment, retry"
                                        : "the name is free once owner-ttl has passed, retry then");
            return;
        }
        if (existing->id == SEGMENT_SELF_ID || strcmp(existing->owner, oname) || existing->size != size ||
            (tenant && (existing->tenant == NULL || strcmp(existing->tenant, tenant)))) {
            addReplyErrorFormat(c, "-EXISTS segment '%s' is mounted by another owner or with another size",
                                name);
            return;
        }
        char *idhash = identity ? identityHash(identity) : NULL;
        int same_memory = idhash && existing->identity && !strcmp(idhash, existing->identity);
        if (existing->state == SEG_DETACHED && same_memory) {
            zfree(idhash);
            mountReattach(c, existing, token, host, endpoints, nendpoints, base, rkey, tier);
            return;
        }
        if (existing->state == SEG_DETACHED || (idhash && existing->identity && !same_memory)) {
            /* Not provably the memory the objects there were written to (a
             * restarted process under the same owner name, e.g. pid 1 in a
             * container): its objects go, the name is mounted afresh. */
            serverLog(LL_NOTICE, "Segment '%s' (id %llu) mounted again by owner %s %s: its objects are dropped and "
                                 "it is mounted as new memory",
                      name, (unsigned long long)existing->id, oname,
                      identity ? "with another identity" : "without the identity it was mounted with");
            segmentUnmount(existing);
            zfree(idhash);
            existing = NULL;
        } else {
            zfree(idhash);
            /* The segment's own owner: a server user remounting a tenant's
             * segment under its owner's name keeps that owner alive. */
            ownerAttachClient(existing->ownerp ? existing->ownerp : mountOwner(oname, tenant), c);
            segmentSetToken(existing, token); /* rotated: a remount revokes what was handed out */
            addReplyLongLong(c, (long long)existing->id);
            return;
        }
    }
    /* The segment table is the server's, one for every user: a tenant
     * that could fill it (65535 slots; ~5 KiB of heap each) would leave the
     * others nothing to mount. */
    if (tenant && server.tenant_max_segments &&
        segmentCountTenant(tenant) >= (uint32_t)server.tenant_max_segments) {
        addReplyErrorFormat(c, "-LIMIT this user has tenant-max-segments (%lld) segments mounted: "
                            "unmount some first", server.tenant_max_segments);
        return;
    }
    /* The operator's bound (~5.7 KiB of heap a segment, outside maxmemory;
     * 65535 of them are 375 MB), below the table's own. Segments loaded
     * from the log or a primary's stream are not refused by it. */
    if (segmentCount() >= (uint64_t)server.max_segments) {
        addReplyErrorFormat(c, "-LIMIT the server has max-segments (%lld) segments mounted: unmount some first",
                            server.max_segments);
        return;
    }
    if (segmentCount() >= SEGMENT_MAX_SLOTS) {
        addReplyErrorFormat(c, "ERR at most %d segments can be mounted", SEGMENT_MAX_SLOTS);
        return;
    }
    segment *s = segmentCreateRemote(name, size, oname);
    if (s == NULL) {
        addReplyError(c, "ERR cannot create the segment's allocator");
        return;
    }
    s->tenant = tenant ? zstrdup(tenant) : NULL;
    segmentDescribe(s, c, host, endpoints, nendpoints, base, rkey, tier);
    s->mounted_ms = mstime();
    s->identity = identity ? identityHash(identity) : NULL;
    segmentSetToken(s, token);
    if (segmentTableAdd(s) != 0) {
        segmentRelease(s);
        addReplyErrorFormat(c, "ERR no segment slot left (at most %d)", SEGMENT_MAX_SLOTS);
        return;
    }
    owner *o = mountOwner(oname, tenant);
    ownerSegmentAdded(o, s);
    ownerAttachClient(o, c);
    aofSegmentMounted(s);
    serverLog(LL_NOTICE, "Mounted segment '%s' (id %llu, %llu bytes, owner %s)", s->name,
              (unsigned long long)s->id, (unsigned long long)s->size, s->owner);
    addReplyLongLong(c, (long long)s->id);
}

void unmountCommand(client *c) {
    segment *s = aclLookupSegment(c, c->argv[1]);
    long long graceful = -1;
    if (c->argc == 4 && !strcasecmp(c->argv[2], "graceful")) {
        if (getLongLongFromObjectOrReply(c, c->argv[3], &graceful, NULL) != C_OK) return;
        if (graceful < 0) {
            addReplyError(c, "ERR GRACEFUL wants a time in milliseconds >= 0");
            return;
        }
    } else if (c->argc != 2) {
        addReplyErrorSyntax(c);
        return;
    }
    if (s == NULL || !aclSegmentVisible(c, s)) {
        addReplyErrorFormat(c, "ERR no such segment '%s'", c->argv[1]);
        return;
    }
    if (s->id != SEGMENT_SELF_ID && aclSegmentTenantFor(c) && s->tenant == NULL) {
        addReplyError(c, "-NOPERM the segment is shared: only a user with allkeys may unmount it");
        return;
    }
    if (s->id == SEGMENT_SELF_ID) {
        addReplyError(c, "ERR the server's own segment cannot be unmounted");
        return;
    }
    if (graceful >= 0 && s->state != SEG_DETACHED) { /* a detached one serves nothing: at once */
        /* No new allocations from now on; unmounted at the deadline. */
        /* Re-issuing can only bring the deadline closer, never postpone it. */
        long long deadline = addSaturate(monoMs(), graceful);
        if (s->state != SEG_DRAINING) {
            s->drain_deadline_ms = deadline;
            s->state = SEG_DRAINING;
            drainAdd(s);
        } else if (deadline < s->drain_deadline_ms) {
            s->drain_deadline_ms = deadline;
            drainUp(s->drain_index);
        }
        if (s->ownerp && ownerHeldBy(s->ownerp, c)) s->drain_client_id = c->id;
        addReplyLongLong(c, 0);
        return;
    }
    serverLog(LL_NOTICE, "Unmounting segment '%s' (id %llu)", s->name, (unsigned long long)s->id);
    owner *o = s->ownerp;
    addReplyLongLong(c, (long long)segmentUnmount(s));
    if (o) ownerUnmountedBy(o, c); /* its last: this connection holds it no more */
}

static void addReplySegment(client *c, segment *s) {
    allocStats as = {0};
    if (aclUserSeesSegmentUsage(c->user, s)) {
        if (s->mem) zerofreeReclaim(1); /* used/objects as after the frees (zerofree.c) */
        allocGetStats(s->alloc, &as);
    } else {
        as.free = s->size; /* a shared segment, to a tenant: its capacity only (acl.c) */
    }
    addReplyMapLen(c, 13);
    addReplyBulkCString(c, "id");
    addReplyLongLong(c, (long long)s->id);
    addReplyBulkCString(c, "name");
    addReplyBulkCString(c, s->name);
    addReplyBulkCString(c, "owner");
    addReplyBulkCString(c, s->owner);
    addReplyBulkCString(c, "size");
    addReplyLongLong(c, (long long)s->size);
    addReplyBulkCString(c, "used");
    addReplyLongLong(c, (long long)as.used);
    addReplyBulkCString(c, "tier");
    addReplyBulkCString(c, segmentTierName(s->tier));
    addReplyBulkCString(c, "host");
    addReplyBulkCString(c, s->host ? s->host : "");
    addReplyBulkCString(c, "endpoints");
    addReplyArrayLen(c, s->nendpoints);
    for (int i = 0; i < s->nendpoints; i++) addReplyBulkCString(c, s->endpoints[i]);
    addReplyBulkCString(c, "base");
    addReplyLongLong(c, (long long)s->base);
    /* The rkeys are to RDMA what the token is to shm and tcp: whoever holds
     * them reads and writes the registered memory through the host's open
     * QP listener. So they go to those who may get the token, by the same
     * rule (SEGMENT.TOKEN); a tenant sees "" for a shared segment. */
    addReplyBulkCString(c, "rkey");
    addReplyBulkCString(c, s->rkey && aclTenantMayHostIn(aclSegmentTenantFor(c), s) ? s->rkey : "");
    addReplyBulkCString(c, "objects");
    addReplyLongLong(c, (long long)as.allocations);
    addReplyBulkCString(c, "state");
    addReplyBulkCString(c, segmentStateName(s));
    addReplyBulkCString(c, "free");
    addReplyLongLong(c, (long long)as.free);
}

void segmentsCommand(client *c) {
    long long n = 0;
    for (uint32_t i = 0; i < segtabLen; i++)
        if (segtab[i] && aclSegmentVisible(c, segtab[i])) n++;
    addReplyArrayLen(c, n);
    for (uint32_t i = 0; i < segtabLen; i++)
        if (segtab[i] && aclSegmentVisible(c, segtab[i])) addReplySegment(c, segtab[i]);
}

void segmentInfoCommand(client *c) {
    segment *s = aclLookupSegment(c, c->argv[1]);
    if (s == NULL || !aclSegmentVisible(c, s)) addReplyNull(c);
    else addReplySegment(c, s);
}

/* SEGMENT.TOKEN segment: the capability a peer presents to the segment's
 * host (SEG.AUTH id token) to read and write it, to a user who may see the
 * segment (acl.c); nil otherwise, exactly as for no such segment, and for
 * the pool (the server serves it itself, under ACLs). */
void segmentTokenCommand(client *c) {
    segment *s = aclLookupSegment(c, c->argv[1]); /* a name is looked up among those this user may see */
    if (s == NULL || !aclSegmentVisible(c, s) || s->token == NULL || !aclTenantMayHostIn(aclSegmentTenantFor(c), s))
        addReplyNull(c);
    else addReplyBulkCString(c, s->token);
}

void heartbeatCommand(client *c) {
    if (server.cluster && clusterNodeIsReplica(server.cluster->myself)) {
        /* Demoted (a failover): the segments are mounted on the primary of
         * the slots now; MOUNT here answers -READONLY, which sends
         * libmooncake to the slot's owner in its map. */
        addReplyError(c, "-NEEDREMOUNT this node is a replica: mount on the primary of its slots");
        return;
    }
    /* A tenant's owners are its own names; a server user reaches any. */
    const char *tenant = aclSegmentTenantFor(c);
    owner *o = tenant ? ownerLookup(tenant, c->argv[1], sdslen(c->argv[1]))
                      : ownerLookupAny(c->argv[1], sdslen(c->argv[1]));
    if (o == NULL || !ownerIsAlive(o)) {
        addReplyError(c, "-NEEDREMOUNT owner is unknown or was declared dead: mount again");
        return;
    }
    if (o->ndetached) {
        /* A restart: its segments wait for a MOUNT with their identity. */
        addReplyError(c, "-NEEDREMOUNT the server restarted: mount again (with the segment's IDENTITY) to "
                         "re-attach its objects");
        return;
    }
    ownerAttachClient(o, c);
    addReplyOk(c);
}

/* Unmounts draining segments whose time is up: the heap's top while it is
 * due, at most SEGMENT_DRAINS_PER_TICK a tick (each unmount drops its
 * replicas). */
#define SEGMENT_DRAINS_PER_TICK 128
void segmentCron(void) {
    long long now = monoMs();
    for (int done = 0; drains.n > 0 && done < SEGMENT_DRAINS_PER_TICK; done++) {
        segment *s = drains.v[0];
        serverVisit(VISITS_CRON_SEGMENTS, 1);
        if (now < s->drain_deadline_ms) break;
        serverLog(LL_NOTICE, "Graceful unmount of segment '%s' (id %llu) done", s->name, (unsigned long long)s->id);
        /* As for UNMOUNT at once: the owner's own connection asked, so its
         * last segment gone, that connection holds it no more. */
        owner *o = s->ownerp;
        client *by = s->drain_client_id ? lookupClientByID(s->drain_client_id) : NULL;
        segmentUnmount(s); /* off the heap */
        if (o && by) ownerUnmountedBy(o, by);
    }
}
