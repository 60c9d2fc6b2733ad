/* test_mooncake_hosted.c -- a segment a client process hosts (mc_mount,
 * mc_host.c).
 *
 *  - hosted: other clients PREFER it and move bytes to and from it over
 *    TCP and shm; the server's accounting (SEGMENT.INFO used/objects,
 *    GET.REPLICAS) shows where they went.
 *  - keepalive: a hosting handle kept alive by its heartbeat through idle
 *    timeouts and killed connections, mounted again (-NEEDREMOUNT) when the
 *    server let it go; idle data connections replaced without a failed call.
 *  - host-tokens: the hosted segment admits a peer only with the segment's
 *    token (SEG.AUTH) or the host's credentials, on tcp and the unix socket,
 *    with a cap on connections (issue 25, finding 5).
 *
 * Together because all three drive the server side a client process runs
 * (mc_host.c) rather than the server's own pool.
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main();
 * test_mooncake.h: the shared helpers).
 */
#include "test_mooncake.h"

/* ==== 3. a segment hosted by a client =========================================== */

void testHostedSegment(void) {
    const char *group = "hosted segment";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *host = NULL, *ctcp = NULL, *cshm = NULL;
    long long host_id = -1;
    const size_t n = 1 * MiB + 7;

    TEST("hosted segment: mc_mount 64 MiB \"host-a\" registers it with the server") {
        host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(host != NULL);
        CHECK(r != NULL);
        if (host) {
            int rc = mc_mount(host, 64 * MiB, "host-a");
            if (rc != MC_OK) fprintf(stderr, "  mc_mount: %d %s (%s)\n", rc, mc_strerror(rc), lastErr(host));
            CHECK_EQ(rc, MC_OK);
            host_id = mc_mount_id(host);
            CHECK(host_id > 1);
        }
        CHECK_EQ(segInfoInt(r, "host-a", "id"), host_id);
        CHECK_EQ(segInfoInt(r, "host-a", "size"), (long long)(64 * MiB));
        CHECK_EQ(segInfoInt(r, "host-a", "used"), 0);
    }
    TEST("hosted segment: a put preferring host-a over tcp lands there and reads back") {
        ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        hostedPutGet(ctcp, r, "ha:tcp", n, MC_TRANSPORT_TCP, host_id);
    }
    TEST("hosted segment: a put preferring host-a over shm lands there and reads back") {
        cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
        hostedPutGet(cshm, r, "ha:shm", n, MC_TRANSPORT_SHM, host_id);
    }
    TEST("hosted segment: each value reads back over the other transport") {
        char *v = xmalloc(n);
        fillPattern(v, n, seedOf("ha:shm", n));
        CHECK(getSame(ctcp, "ha:shm", v, n, MC_TRANSPORT_TCP));
        fillPattern(v, n, seedOf("ha:tcp", n));
        CHECK(getSame(cshm, "ha:tcp", v, n, MC_TRANSPORT_SHM));
        free(v);
    }
    TEST("hosted segment: SEGMENT.INFO host-a accounts for both objects") {
        long long used = segInfoInt(r, "host-a", "used");
        CHECK(used >= (long long)(2 * n));
        CHECK(used < (long long)(64 * MiB));
        CHECK_EQ(segInfoInt(r, "host-a", "objects"), 2);
        if (used < (long long)(2 * n)) fprintf(stderr, "  used %lld\n", used);
    }
    TEST("hosted segment: the hosting handle reads its own segment") {
        char *v = xmalloc(n);
        fillPattern(v, n, seedOf("ha:tcp", n));
        CHECK(getSame(host, "ha:tcp", v, n, MC_TRANSPORT_AUTO));
        free(v);
    }
    TEST("hosted segment: its abstract unix socket admits only the host's user (as a 0755 file did)") {
        /* Run as root, a child turns into nobody and must be refused; run
         * as anyone else, the same user is admitted (PING answers). */
        char ep[300];
        segEndpoint(r, "host-a", "unix://@", ep, sizeof(ep));
        CHECK(ep[0] != '\0');
        int as_root = geteuid() == 0;
        pid_t pid = ep[0] ? fork() : -1;
        if (pid == 0) {
            if (as_root && setuid(65534) != 0) _exit(3);
            struct sockaddr_un sa;
            memset(&sa, 0, sizeof(sa));
            sa.sun_family = AF_UNIX;
            size_t nl = strlen(ep + 8);
            memcpy(sa.sun_path + 1, ep + 8, nl); /* sun_path[0] = 0: abstract */
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl)))
                _exit(4);
            /* Refused, the host may have written its reason and closed
             * before this write: EPIPE then, and the reason is still there
             * to read. */
            if (write(fd, "PING\r\n", 6) != 6 && !(as_root && (errno == EPIPE || errno == ECONNRESET))) _exit(5);
            char buf[256];
            ssize_t got = read(fd, buf, sizeof(buf) - 1);
            buf[got > 0 ? got : 0] = '\0';
            const char *want = as_root ? "-ERR unix socket peers must run as the hosting process's user" : "+PONG";
            _exit(strncmp(buf, want, strlen(want)) ? 6 : 0);
        }
        int status = -1;
        if (pid > 0) waitpid(pid, &status, 0);
        CHECK(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (pid > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            fprintf(stderr, "  child (%s) status %d\n", as_root ? "nobody" : "same user", status);
    }
    TEST("hosted segment: a name ending in \":0\" gets the listener's port (mc_mount_name)") {
        mc_client *h2 = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(h2 != NULL);
        CHECK(mc_mount_name(h2) == NULL); /* hosts nothing yet */
        CHECK_EQ(mc_set_host_ports(h2, 2000, 1000), MC_ERR_INVALID);
        CHECK_EQ(mc_set_host_ports(h2, 0, 70000), MC_ERR_INVALID);
        CHECK_EQ(mc_set_host_ports(h2, 0, 0), MC_OK);
        if (h2 && mc_mount(h2, 4 * MiB, "rank-host:0") == MC_OK) {
            const char *name = mc_mount_name(h2);
            char ep[300], want[300];
            segEndpoint(r, name ? name : "?", "tcp://", ep, sizeof(ep));
            const char *port = strrchr(ep, ':');
            snprintf(want, sizeof(want), "rank-host%s", port ? port : ":?");
            CHECK(name != NULL && port != NULL && !strcmp(name, want));
            CHECK_EQ(segInfoInt(r, name ? name : "?", "id"), mc_mount_id(h2));
            if (name == NULL || strcmp(name, want)) fprintf(stderr, "  name %s, endpoint %s\n", name, ep);
        } else {
            CHECK(0);
        }
        mcClose(&h2);
    }
    TEST("mc_putv: one object from a header and a payload in any host memory, read back whole") {
        char hdr[28], *payload = xmalloc(MiB), *back = xmalloc(MiB + 28);
        memset(hdr, 'H', sizeof(hdr));
        fillPattern(payload, MiB, seedOf("putv", MiB));
        struct iovec iov[2] = {{hdr, sizeof(hdr)}, {payload, MiB}};
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK_EQ(mc_putv(ctcp, "putv:k", 6, iov, 2, NULL), MC_OK);
            CHECK_EQ(mc_putv(ctcp, "putv:k", 6, iov, 2, NULL), MC_ERR_EXISTS);
            CHECK_EQ(mc_get(ctcp, "putv:k", 6, back, MiB + 28), (long long)(MiB + 28));
            CHECK(!memcmp(back, hdr, 28) && !memcmp(back + 28, payload, MiB));
            struct iovec none[1] = {{hdr, 0}};
            CHECK_EQ(mc_putv(ctcp, "putv:e", 6, none, 1, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_putv(ctcp, "putv:e", 6, iov, 0, NULL), MC_ERR_INVALID);
        }
        free(payload);
        free(back);
    }
    TEST("hosted segment: prefer_hint passes over a segment that does not exist; plain prefer refuses it") {
        char v[100];
        memset(v, 'h', sizeof(v));
        mc_put_opts o = {0};
        o.prefer = "no-such-host:1";
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK(put(ctcp, "hint:strict", v, sizeof(v), &o) < 0);
            CHECK_EQ(mc_exists(ctcp, "hint:strict", 11), 0);
            o.prefer_hint = 1;
            CHECK_EQ(put(ctcp, "hint:lax", v, sizeof(v), &o), MC_OK);
            o.prefer = "host-a"; /* one that exists is still tried first */
            CHECK_EQ(put(ctcp, "hint:host-a", v, sizeof(v), &o), MC_OK);
            long long segs[4], offs[4];
            CHECK_EQ(replicaList(r, "hint:host-a", segs, offs, 4), 1);
            CHECK_EQ(segs[0], host_id);
        }
    }
    TEST("hosted segment: a reader outlives 200 hosts that came and went, its descriptors stay bounded") {
        /* Each host's segment is read over shm (a mapping of its memfd) and
         * tcp (a data connection); once it is unmounted, nothing of it may
         * stay in the reader: before mcSegSweep the handle kept one mapping
         * and one socket per host it ever read, +400 descriptors here. */
        mc_client *rd = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(rd != NULL);
        char v[4096], back[4096];
        memset(v, 'q', sizeof(v));
        int fds0 = -1, ok = 1;
        for (int i = 0; i < 200 && rd && ok; i++) {
            char name[32];
            snprintf(name, sizeof(name), "churn-%d", i);
            mc_client *h = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
            ok = h && mc_mount(h, 1 * MiB, name) == MC_OK;
            mc_put_opts o = {0};
            o.prefer = name;
            o.replace = 1;
            ok = ok && put(rd, "churn", v, sizeof(v), &o) == MC_OK;
            ok = ok && mc_get(rd, "churn", 5, back, sizeof(back)) == (long long)sizeof(back);
            mcClose(&h);
            if (i == 0) fds0 = countOpenFds();
        }
        CHECK(ok);
        int fds = countOpenFds();
        /* what stays: at most the cache's floor (MC_SEG_SWEEP_MIN, 16) of
         * segments, two descriptors each */
        CHECK(fds - fds0 <= 36);
        if (fds - fds0 > 36) fprintf(stderr, "  descriptors %d after the first host, %d after 200\n", fds0, fds);
        mcClose(&rd);
    }
    TEST("hosted segment: a dead host's mapping and socket leave a reader at its first call after MC_SEG_SWEEP_MS") {
        /* Below the count that starts a sweep, time does: the dead host's
         * memory must not stay mapped here for as long as no new segment
         * comes. The period is 30 s; 100 ms here. */
        setenv("MC_SEG_SWEEP_MS", "100", 1);
        mc_client *rd = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        unsetenv("MC_SEG_SWEEP_MS");
        mc_client *h = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        char v[4096], back[4096];
        memset(v, 'w', sizeof(v));
        mc_put_opts o = {0};
        o.prefer = "sweep-host";
        o.replace = 1;
        int ok = rd && h && mc_mount(h, 1 * MiB, "sweep-host") == MC_OK;
        ok = ok && put(rd, "sweep", v, sizeof(v), &o) == MC_OK;
        ok = ok && mc_get(rd, "sweep", 5, back, sizeof(back)) == (long long)sizeof(back);
        CHECK(ok);
        CHECK_EQ(mc_last_transport(rd), MC_TRANSPORT_SHM);
        mcClose(&h);
        tsSleepMs(150);
        int before = countOpenFds();
        CHECK(rd && mc_exists(rd, "sweep", 5) == 0); /* gone with its segment; the call sweeps first */
        int after = countOpenFds();
        CHECK(after <= before - 2); /* the mapping's descriptor and the data connection */
        if (after > before - 2) fprintf(stderr, "  descriptors %d before the call, %d after\n", before, after);
        mcClose(&rd);
    }
    mcClose(&ctcp);
    mcClose(&cshm);
    mcClose(&host);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 13. keeping a hosted segment alive, replacing idle connections ========== */

/* A put preferring segment name, read back byte for byte. */
static void putPreferring(mc_client *c, const char *name, const char *key, size_t n, int transport) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    char *v = xmalloc(n);
    fillPattern(v, n, seedOf(key, n));
    mc_put_opts o = {0};
    o.prefer = name;
    o.replace = 1;
    CHECK_EQ(put(c, key, v, n, &o), MC_OK);
    CHECK(getSame(c, key, v, n, transport));
    free(v);
}

/* Sets owner-ttl, kills every normal client but the one asking (the
 * hosting handle's metadata connection among them), then waits 2.5 s: more
 * than one heartbeat. The asking connection is closed first, or the server's
 * idle timeout would close it meanwhile. */
static void killClientsThenWait(tsServer *s, int owner_ttl_ms) {
    redisContext *r = rTcp(s);
    redisReply *rep = rcmd(r, "CONFIG SET owner-ttl %d", owner_ttl_ms);
    CHECK(expectOk(rep, "CONFIG SET owner-ttl"));
    rep = rcmd(r, "CLIENT KILL TYPE normal SKIPME yes");
    CHECK(replyInt(rep) >= 1);
    freeReplyObject(rep);
    rClose(&r);
    tsSleepMs(2500);
}

void testKeepalive(void) {
    const char *group = "keepalive";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    /* Idle connections are closed after 1 s; an owner with no connection
     * dies 500 ms later. */
    if (!tsGroupStarted(tsStart(&s, "--timeout", "1", "--owner-ttl", "500", NULL), &s, group)) return;
    mc_client *host = NULL;
    long long id = -1;

    TEST("keepalive: a hosting handle idle for 3 s (timeout 1, owner-ttl 500) keeps its segment") {
        host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(host != NULL);
        CHECK_EQ(host ? mc_mount(host, 16 * MiB, "host-k") : MC_ERR_INVALID, MC_OK);
        id = host ? mc_mount_id(host) : -1;
        CHECK(id > 1);
        tsSleepMs(3000);
        redisContext *r = rTcp(&s);
        CHECK_EQ(segInfoInt(r, "host-k", "id"), id);
        rClose(&r);
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        putPreferring(c, "host-k", "ka:idle", 1 * MiB + 3, MC_TRANSPORT_TCP);
        mcClose(&c);
    }
    TEST("keepalive: its metadata connection killed, the heartbeat reconnects and the owner lives on") {
        killClientsThenWait(&s, 5000);
        redisContext *r = rTcp(&s);
        CHECK_EQ(segInfoInt(r, "host-k", "id"), id);
        CHECK_EQ(host ? mc_mount_id(host) : -1, id);
        CHECK(!tsLogHas(&s, "is gone: unmounting segment 'host-k'"));
        rClose(&r);
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        putPreferring(c, "host-k", "ka:killed", 1 * MiB + 3, MC_TRANSPORT_TCP);
        mcClose(&c);
    }
    TEST("keepalive: an owner the server let go mounts again (-NEEDREMOUNT) and serves") {
        killClientsThenWait(&s, 0);
        redisContext *r = rTcp(&s);
        long long now = segInfoInt(r, "host-k", "id");
        CHECK(now > 1);
        CHECK_EQ(host ? mc_mount_id(host) : -1, now);
        /* The usual path: the owner was reaped before the next beat, so the
         * segment came back under a new id. */
        if (tsLogHas(&s, "is gone: unmounting segment 'host-k'")) CHECK(now != id);
        CHECK(expectOk(rcmd(r, "CONFIG SET owner-ttl 500"), "CONFIG SET owner-ttl back"));
        rClose(&r);
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        putPreferring(c, "host-k", "ka:remounted", 1 * MiB + 3, MC_TRANSPORT_TCP);
        mcClose(&c);
    }
    mcClose(&host);
    tsGroupFinish(&s, group, failed0);

    /* A server with no unix socket: its pool's only endpoint is tcp, so no
     * other path can hide a stale connection. */
    if (!tsGroupStarted(tsStart(&s, "--timeout", "1", "--unixsocket", "", NULL), &s, group)) return;
    failed0 = test_failed;
    TEST("keepalive: data connections the server closed while idle are replaced without a failed call") {
        /* 2 streams: the metadata connection (which also carries a slice)
         * and a worker's, both closed by the server's idle timeout. */
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        if (c) CHECK_EQ(mc_set_streams(c, 2), MC_OK);
        putPreferring(c, "self", "ka:self", 4 * MiB, MC_TRANSPORT_TCP);
        tsSleepMs(2500);
        putPreferring(c, "self", "ka:self", 4 * MiB, MC_TRANSPORT_TCP);
        mcClose(&c);
    }
    tsGroupFinish(&s, group, failed0);
}

/* ==== hosted segment tokens (issue 25, finding 5) ===================================================== */

/* A hosted segment admits a peer only with the segment's token (SEG.AUTH,
 * the server hands it out by SEGMENT.TOKEN) or the host's credentials --
 * here the server has no password, so only the token -- on tcp and on the
 * unix socket (SHM.ATTACH hands out the memfd), with a cap on connections
 * and on SEG.WRITEV payload buffered across them. Before, anyone on the
 * machine read and overwrote objects, and 1000 connections made 1000
 * threads. */

#define HT_SEGSIZE (16 * MiB)

/* A raw connection to a tcp://ip:port or unix://@name endpoint; -1 if none. */
static int htConnect(const char *ep) {
    int fd = -1;
    if (!strncmp(ep, "unix://@", 8)) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        size_t nl = strlen(ep + 8);
        if (nl + 1 > sizeof(sa.sun_path)) return -1;
        memcpy(sa.sun_path + 1, ep + 8, nl);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl))) {
            close(fd);
            fd = -1;
        }
        return fd;
    }
    const char *colon = strrchr(ep, ':');
    if (strncmp(ep, "tcp://", 6) || colon == NULL) return -1;
    char ip[64];
    snprintf(ip, sizeof(ip), "%.*s", (int)(colon - ep - 6), ep + 6);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) return -1;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int htSend(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The first line the peer sends (CRLF dropped) within ms; "" on EOF, NULL
 * on a timeout or an error. */
static const char *htLine(int fd, char *buf, size_t cap, int ms) {
    size_t n = 0;
    while (n + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ms) != 1) return NULL;
        ssize_t r = read(fd, buf + n, 1);
        if (r < 0) return NULL;
        if (r == 0) break;
        if (buf[n] == '\n') break;
        n++;
    }
    buf[n] = '\0';
    if (n && buf[n - 1] == '\r') buf[n - 1] = '\0';
    return buf;
}

/* Whether the peer closed fd (EOF or reset) within ms. */
static int htClosed(int fd, int ms) {
    char c;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) != 1) return 0;
    return read(fd, &c, 1) <= 0;
}

/* A RESP command of argc C strings. */
static int htCmd(int fd, int argc, const char **argv) {
    char buf[4096];
    int n = snprintf(buf, sizeof(buf), "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    return n < (int)sizeof(buf) ? htSend(fd, buf, (size_t)n) : -1;
}

/* Sends argv and checks the first reply line starts with want. */
static int htExpect(int fd, int argc, const char **argv, const char *want, const char *what) {
    char line[512];
    const char *got = htCmd(fd, argc, argv) == 0 ? htLine(fd, line, sizeof(line), 5000) : NULL;
    int ok = got && !strncmp(got, want, strlen(want));
    if (!ok) fprintf(stderr, "  %s: expected %s..., got %s\n", what, want, got ? got : "(nothing)");
    return ok;
}

void testHostTokens(void) {
    const char *group = "hosted segment tokens";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP), *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    long long id = -1;
    char idbuf[24] = "0", tcp_ep[300] = "", unix_ep[300] = "", token[200] = "";
    const size_t n = 300 * 1000 + 3;
    if (host && mc_mount(host, HT_SEGSIZE, "host-a") == MC_OK) id = mc_mount_id(host);
    snprintf(idbuf, sizeof(idbuf), "%lld", id);
    segEndpoint(r, "host-a", "tcp://", tcp_ep, sizeof(tcp_ep));
    segEndpoint(r, "host-a", "unix://@", unix_ep, sizeof(unix_ep));
    redisReply *tr = rcmd(r, "SEGMENT.TOKEN host-a");
    if (tr && tr->type == REDIS_REPLY_STRING) snprintf(token, sizeof(token), "%s", tr->str);
    freeReplyObject(tr);

    TEST("host tokens: libmooncake readers and writers (other handles, tcp and shm) move bytes exactly") {
        CHECK(id > 1 && tcp_ep[0] && unix_ep[0] && ctcp && cshm);
        CHECK(strlen(token) >= 32);
        hostedPutGet(ctcp, r, "tk:tcp", n, MC_TRANSPORT_TCP, id);
        hostedPutGet(cshm, r, "tk:shm", n, MC_TRANSPORT_SHM, id);
        char *v = xmalloc(n);
        fillPattern(v, n, seedOf("tk:shm", n));
        CHECK(getSame(ctcp, "tk:shm", v, n, MC_TRANSPORT_TCP));
        fillPattern(v, n, seedOf("tk:tcp", n));
        CHECK(getSame(cshm, "tk:tcp", v, n, MC_TRANSPORT_SHM));
        free(v);
    }
    TEST("host tokens: without the token a raw peer is refused SEG.READ, SEG.WRITE, SEG.READV, SEG.WRITEV, SHM.ATTACH") {
        long long segs[2], offs[2];
        char off[24] = "0";
        if (replicaList(r, "tk:tcp", segs, offs, 2) == 1) snprintf(off, sizeof(off), "%lld", offs[0]);
        int fd = htConnect(tcp_ep);
        CHECK(fd >= 0);
        if (fd >= 0) {
            const char *rd[] = {"SEG.READ", idbuf, off, "16"};
            CHECK(htExpect(fd, 4, rd, "-NOAUTH", "SEG.READ without a token"));
            const char *wr[] = {"SEG.WRITE", idbuf, off, "XXXXXXXXXXXXXXXX"};
            CHECK(htExpect(fd, 4, wr, "-NOAUTH", "SEG.WRITE without a token"));
            const char *bad[] = {"SEG.AUTH", idbuf, "00000000000000000000000000000000"};
            CHECK(htExpect(fd, 3, bad, "-WRONGTOKEN", "SEG.AUTH with a wrong token"));
            CHECK(htExpect(fd, 4, rd, "-NOAUTH", "SEG.READ after a wrong token"));
            const char *ping[] = {"PING"};
            CHECK(htExpect(fd, 1, ping, "+PONG", "PING (the server's probe) needs nothing"));
            close(fd);
        }
        /* A vector is refused at its segment id, before any payload is
         * buffered, and the connection is closed. */
        const char *rv[] = {"SEG.READV", idbuf, off, "16"}, *wv[] = {"SEG.WRITEV", idbuf, off, "XXXXXXXXXXXXXXXX"};
        for (int k = 0; k < 2; k++) {
            fd = htConnect(tcp_ep);
            CHECK(fd >= 0);
            if (fd < 0) continue;
            CHECK(htExpect(fd, 4, k ? wv : rv, "-NOAUTH", k ? "SEG.WRITEV without a token" : "SEG.READV without a token"));
            CHECK(htClosed(fd, 5000));
            close(fd);
        }
        int ufd = htConnect(unix_ep);
        CHECK(ufd >= 0);
        if (ufd >= 0) {
            const char *at[] = {"SHM.ATTACH", idbuf};
            CHECK(htExpect(ufd, 2, at, "-NOAUTH", "SHM.ATTACH without a token"));
            const char *rd[] = {"SEG.READ", idbuf, off, "16"};
            CHECK(htExpect(ufd, 4, rd, "-NOAUTH", "SEG.READ over the unix socket without a token"));
            close(ufd);
        }
        /* Nothing was written: the values read back exactly. */
        char *v = xmalloc(n);
        fillPattern(v, n, seedOf("tk:tcp", n));
        CHECK(getSame(cshm, "tk:tcp", v, n, MC_TRANSPORT_SHM));
        free(v);
    }
    TEST("host tokens: with the token SEGMENT.TOKEN hands out, a raw peer reads the value's bytes") {
        long long segs[2], offs[2];
        char off[24] = "0", line[128];
        if (replicaList(r, "tk:tcp", segs, offs, 2) == 1) snprintf(off, sizeof(off), "%lld", offs[0]);
        char *want = xmalloc(n);
        fillPattern(want, n, seedOf("tk:tcp", n));
        int fd = htConnect(tcp_ep);
        CHECK(fd >= 0);
        if (fd >= 0) {
            const char *ok[] = {"SEG.AUTH", idbuf, token};
            CHECK(htExpect(fd, 3, ok, "+OK", "SEG.AUTH with the segment's token"));
            const char *rd[] = {"SEG.READ", idbuf, off, "16"};
            char got[18];
            const char *hdr = htCmd(fd, 4, rd) == 0 ? htLine(fd, line, sizeof(line), 5000) : NULL;
            CHECK(hdr && !strcmp(hdr, "$16"));
            size_t have = 0;
            while (hdr && have < sizeof(got)) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                ssize_t k = poll(&p, 1, 5000) == 1 ? read(fd, got + have, sizeof(got) - have) : -1;
                if (k <= 0) break;
                have += (size_t)k;
            }
            CHECK(have == sizeof(got) && !memcmp(got, want, 16));
            close(fd);
        }
        int ufd = htConnect(unix_ep);
        if (ufd >= 0) {
            const char *ok[] = {"SEG.AUTH", idbuf, token};
            CHECK(htExpect(ufd, 3, ok, "+OK", "SEG.AUTH over the unix socket"));
            const char *at[] = {"SHM.ATTACH", idbuf};
            CHECK(htExpect(ufd, 2, at, "*2", "SHM.ATTACH with the token"));
            close(ufd);
        }
        free(want);
    }
    TEST("host tokens: the server's relayed GET presents the token to the real host and gets the bytes") {
        char *want = xmalloc(n);
        fillPattern(want, n, seedOf("tk:shm", n));
        redisReply *g = rcmd(r, "GET tk:shm");
        CHECK(g && g->type == REDIS_REPLY_STRING && (size_t)g->len == n && !memcmp(g->str, want, n));
        if (!(g && g->type == REDIS_REPLY_STRING)) showReply("GET tk:shm (relayed)", g);
        freeReplyObject(g);
        free(want);
    }
    TEST("host tokens: a connection over the cap (512) gets an error and is closed; a freed slot serves again") {
        enum { CAP = 512 };
        int fds[CAP + 1], nfd = 0;
        const char *ping[] = {"PING"}, *admit[] = {"SEG.AUTH", idbuf, token};
        char line[256];
        const char *got = NULL;
        /* Until one is refused: the readers above hold a few already. Each
         * is admitted (SEG.AUTH): one that only PINGed would be closed by
         * the host after HOST_PREAUTH_TIMEOUT_S (10 s), freeing its slot,
         * and on a busy machine opening 512 took longer than that (the
         * 513th was served). */
        while (nfd <= CAP) {
            int fd = htConnect(tcp_ep);
            got = fd >= 0 && htCmd(fd, 3, admit) == 0 ? htLine(fd, line, sizeof(line), 5000) : NULL;
            if (got == NULL || strcmp(got, "+OK")) {
                if (fd >= 0) {
                    CHECK(htClosed(fd, 5000));
                    close(fd);
                }
                break;
            }
            fds[nfd++] = fd;
        }
        CHECK(got && strstr(got, "-ERR the segment host has too many connections (at most 512)") == got);
        if (!(nfd >= CAP - 8 && nfd <= CAP)) fprintf(stderr, "  %d connections admitted, then: %s\n", nfd, got ? got : "-");
        CHECK(nfd >= CAP - 8 && nfd <= CAP);
        close(fds[--nfd]);
        /* The freed slot: its thread ends when it sees the close. */
        int served = 0;
        for (int tries = 0; tries < 500 && !served; tries++) {
            int fd = htConnect(tcp_ep);
            got = fd >= 0 && htCmd(fd, 1, ping) == 0 ? htLine(fd, line, sizeof(line), 5000) : NULL;
            served = got && !strcmp(got, "+PONG");
            if (fd >= 0) close(fd);
            if (!served) usleep(10 * 1000);
        }
        CHECK(served);
        while (nfd) close(fds[--nfd]);
    }
    TEST("host tokens: half-sent SEG.WRITEVs are bounded in total (256 MiB), one over is refused") {
        /* Each announces a 32 MiB payload and sends none of it: the host
         * reserves 64 MiB for each (its buffer doubles), so four fit and
         * the fifth, whichever it is, is refused and closed. */
        enum { NW = 5 };
        int fds[NW], refused = 0, nfd = 0;
        char head[256];
        int hl = snprintf(head, sizeof(head), "*4\r\n$10\r\nSEG.WRITEV\r\n$%zu\r\n%s\r\n$1\r\n0\r\n$%zu\r\n", strlen(idbuf),
                          idbuf, (size_t)(32 * MiB));
        const char *ok[] = {"SEG.AUTH", idbuf, token};
        for (int i = 0; i < NW; i++) {
            int fd = htConnect(tcp_ep);
            if (fd < 0 || !htExpect(fd, 3, ok, "+OK", "SEG.AUTH") || htSend(fd, head, (size_t)hl) != 0) {
                if (fd >= 0) close(fd);
                break;
            }
            fds[nfd++] = fd;
        }
        CHECK_EQ(nfd, NW);
        for (int i = 0; i < nfd; i++) {
            char line[256];
            const char *got = htLine(fds[i], line, sizeof(line), i == 0 ? 3000 : 300);
            if (got && strstr(got, "-ERR the segment host is buffering too many SEG.WRITEV payloads")) refused++;
        }
        /* Rescan: the refused one may have answered after its poll ran out. */
        if (refused == 0)
            for (int i = 0; i < nfd && !refused; i++) {
                char line[256];
                const char *got = htLine(fds[i], line, sizeof(line), 2000);
                if (got && strstr(got, "buffering too many")) refused++;
            }
        CHECK_EQ(refused, 1);
        while (nfd) close(fds[--nfd]);
        /* Released when they close: a small vector is taken again. */
        int taken = 0;
        char last[24];
        snprintf(last, sizeof(last), "%zu", (size_t)(HT_SEGSIZE - 16));
        for (int tries = 0; tries < 500 && !taken; tries++) {
            int fd = htConnect(tcp_ep);
            const char *wv[] = {"SEG.WRITEV", idbuf, last, "0123456789abcdef"};
            char line[256];
            const char *got = fd >= 0 && htExpect(fd, 3, ok, "+OK", "SEG.AUTH") && htCmd(fd, 4, wv) == 0
                                  ? htLine(fd, line, sizeof(line), 5000)
                                  : NULL;
            taken = got && !strcmp(got, "+OK");
            if (fd >= 0) close(fd);
            if (!taken) usleep(10 * 1000);
        }
        CHECK(taken);
    }
    /* A second host whose timeouts are short enough to wait for. Before,
     * an admitted peer had none: one idle or stalled held its thread and
     * slot for ever (512 of them refused every later peer), and a
     * pre-auth peer PINGing every few seconds was never closed. */
    setenv("MC_HOST_IDLE_MS", "500", 1);
    setenv("MC_HOST_REQUEST_MS", "500", 1);
    setenv("MC_HOST_PREAUTH_MS", "500", 1);
    mc_client *thost = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
    long long tid = thost && mc_mount(thost, HT_SEGSIZE, "host-t") == MC_OK ? mc_mount_id(thost) : -1;
    unsetenv("MC_HOST_IDLE_MS");
    unsetenv("MC_HOST_REQUEST_MS");
    unsetenv("MC_HOST_PREAUTH_MS");
    char tidbuf[24], ttcp[300] = "", ttok[200] = "";
    snprintf(tidbuf, sizeof(tidbuf), "%lld", tid);
    segEndpoint(r, "host-t", "tcp://", ttcp, sizeof(ttcp));
    tr = rcmd(r, "SEGMENT.TOKEN host-t");
    if (tr && tr->type == REDIS_REPLY_STRING) snprintf(ttok, sizeof(ttok), "%s", tr->str);
    freeReplyObject(tr);
    const char *tadmit[] = {"SEG.AUTH", tidbuf, ttok};
    TEST("host timeouts: an admitted peer idle past the idle timeout is closed") {
        CHECK(tid > 1 && ttcp[0] && ttok[0]);
        int fd = htConnect(ttcp);
        CHECK(fd >= 0 && htExpect(fd, 3, tadmit, "+OK", "SEG.AUTH"));
        if (fd >= 0) {
            CHECK(htClosed(fd, 10000));
            close(fd);
        }
    }
    TEST("host timeouts: an admitted peer trickling a SEG.WRITE's payload a byte at a time is closed") {
        int fd = htConnect(ttcp), closed = 0;
        CHECK(fd >= 0 && htExpect(fd, 3, tadmit, "+OK", "SEG.AUTH"));
        char head[160];
        int hl = snprintf(head, sizeof(head), "*4\r\n$9\r\nSEG.WRITE\r\n$%zu\r\n%s\r\n$1\r\n0\r\n$%d\r\n",
                          strlen(tidbuf), tidbuf, 1 << 20);
        if (fd >= 0 && htSend(fd, head, (size_t)hl) == 0) {
            /* A byte every 100 ms, well within the idle timeout each. */
            for (int i = 0; i < 100 && !closed; i++)
                closed = htSend(fd, "x", 1) != 0 || htClosed(fd, 100);
        }
        CHECK(closed);
        if (fd >= 0) close(fd);
    }
    TEST("host timeouts: a peer that PINGs and never presents a token is closed at the pre-auth deadline") {
        int fd = htConnect(ttcp), closed = 0;
        const char *ping[] = {"PING"};
        for (int i = 0; fd >= 0 && i < 100 && !closed; i++) {
            char line[64];
            const char *got = htCmd(fd, 1, ping) == 0 ? htLine(fd, line, sizeof(line), 5000) : NULL;
            closed = got == NULL || strcmp(got, "+PONG") != 0;
            if (!closed) usleep(100 * 1000);
        }
        CHECK(closed);
        if (fd >= 0) close(fd);
    }
    TEST("host timeouts: a libmooncake handle whose idle data connection the host closed writes and reads again") {
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        putPreferring(c, "host-t", "tt:idle", 300 * 1000 + 1, MC_TRANSPORT_TCP);
        tsSleepMs(1500); /* past the host's idle timeout: it closed the data connection */
        putPreferring(c, "host-t", "tt:idle", 300 * 1000 + 1, MC_TRANSPORT_TCP);
        tsSleepMs(1500);
        char *v = xmalloc(300 * 1000 + 1);
        fillPattern(v, 300 * 1000 + 1, seedOf("tt:idle", 300 * 1000 + 1));
        CHECK(getSame(c, "tt:idle", v, 300 * 1000 + 1, MC_TRANSPORT_TCP));
        free(v);
        /* And batches (SEG.WRITEV/SEG.READV on the data connection). */
        enum { NB = 8 };
        char bkeys[NB][16], bval[NB][100], bgot[NB][100];
        mc_kv items[NB];
        int pres[NB];
        long long gres[NB];
        mc_put_opts o = {0};
        o.prefer = "host-t";
        o.replace = 1;
        for (int i = 0; i < NB; i++) {
            snprintf(bkeys[i], sizeof(bkeys[i]), "tt:b%d", i);
            memset(bval[i], 'a' + i, sizeof(bval[i]));
            items[i] = (mc_kv){bkeys[i], strlen(bkeys[i]), bval[i], sizeof(bval[i])};
        }
        CHECK_EQ(c ? mc_batch_put(c, NB, items, &o, pres) : -1, NB);
        tsSleepMs(1500);
        for (int i = 0; i < NB; i++) items[i].buf = bgot[i];
        memset(bgot, 0, sizeof(bgot));
        CHECK_EQ(c ? mc_batch_get(c, NB, items, gres) : -1, NB);
        CHECK(!memcmp(bgot, bval, sizeof(bval)));
        tsSleepMs(1500);
        for (int i = 0; i < NB; i++) items[i].buf = bval[i];
        CHECK_EQ(c ? mc_batch_put(c, NB, items, &o, pres) : -1, NB);
        mcClose(&c);
    }
    mcClose(&thost);
    mcClose(&ctcp);
    mcClose(&cshm);
    mcClose(&host);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}
