/* test_mooncake_basic.c -- the basic calls: round trips, error codes, replica
 * fallback, leases, plain Redis clients.
 *
 * What every caller relies on, each group against a server of its own:
 *
 *  - round-trips: 1 B .. 64 MiB with the transport forced to shared memory
 *    (unix connection) and to the TCP data plane (tcp connection), byte
 *    for byte, with guard bytes after the buffer, and read back over the
 *    other transport: the two paths must land in the same memory.
 *  - errors: the codes a caller branches on: TOO_SMALL, NOT_FOUND, EXISTS
 *    (nothing changed), REPLACE, exists/remove.
 *  - fallback: a helper process hosting one replica (test_mooncake.h,
 *    spawnHostChild) is SIGKILLed while another connection speaks for its
 *    owner (HEARTBEAT), so the server cannot know and keeps its segment
 *    listed and placeable -- a host that died unseen; gets must still
 *    return the right bytes from the other replica, over tcp and shm, with
 *    fresh handles and with one whose data connection went dead. (Seen
 *    deaths: tests/python/test_owner_probe.py.)
 *  - lease: with lease-ttl 1 ms a 64 MiB read outlives its lease and must
 *    be reported as MC_ERR_LEASE_EXPIRED, never handed out as valid.
 *  - interop: mc_put then GET, SET then mc_get.
 *  - lease-release: a get (single or batch, shm or tcp) ends the read lease
 *    it was granted; mc_set_lease_release(c, 0) keeps it to lease-ttl.
 *
 * Together because they are the calls every other group builds on: when
 * one of these fails, start here.
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main();
 * test_mooncake.h: the shared helpers).
 */
#include "test_mooncake.h"

/* ==== 1. round trips over shm and tcp ========================================= */

static const size_t rt_sizes[] = {1, 100, 4 * KiB, 64 * KiB + 3, 1 * MiB, 16 * MiB, 64 * MiB};
#define RT_NSIZES (sizeof(rt_sizes) / sizeof(rt_sizes[0]))
#define RT_MAX (64 * MiB)

/* Every value put over one transport, read over the other. */
static void crossRead(mc_client *reader, const char *written_tag, int reader_transport, char *want) {
    if (!reader) {
        CHECK(reader != NULL);
        return;
    }
    for (size_t i = 0; i < RT_NSIZES; i++) {
        char key[64];
        rtKey(key, sizeof(key), written_tag, rt_sizes[i]);
        fillPattern(want, rt_sizes[i], seedOf(key, rt_sizes[i]));
        CHECK(getSame(reader, key, want, rt_sizes[i], reader_transport));
    }
}

void testRoundTrips(void) {
    const char *group = "round trips";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "256mb", NULL), &s, group)) return;
    char *want = xmalloc(RT_MAX), *got = xmalloc(RT_MAX + GUARD);
    struct {
        int transport;
        const char *uri;
        const char *tag;
        mc_client *c;
    } paths[] = {{MC_TRANSPORT_SHM, s.unix_uri, "shm", NULL}, {MC_TRANSPORT_TCP, s.tcp_uri, "tcp", NULL}};
    for (int p = 0; p < 2; p++) {
        char name[160];
        snprintf(name, sizeof(name), "round trips: connect to %s and force %s", paths[p].uri, paths[p].tag);
        TEST(name) {
            paths[p].c = mcOpen(paths[p].uri, NULL, paths[p].transport);
            CHECK(paths[p].c != NULL);
        }
        for (size_t i = 0; i < RT_NSIZES; i++) {
            snprintf(name, sizeof(name), "round trips: put/get of %zu bytes over %s, byte for byte", rt_sizes[i],
                     paths[p].tag);
            TEST(name) roundTrip(paths[p].c, paths[p].tag, rt_sizes[i], paths[p].transport, want, got);
        }
    }
    TEST("round trips: every value put over shm reads back over tcp, and the other way round") {
        crossRead(paths[1].c, "shm", MC_TRANSPORT_TCP, want);
        crossRead(paths[0].c, "tcp", MC_TRANSPORT_SHM, want);
    }
    mcClose(&paths[0].c);
    mcClose(&paths[1].c);
    free(want);
    free(got);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 2. error codes =========================================================== */

static void errTooSmall(mc_client *c, const char *tag) {
    char key[64], want[1000], buf[1000 + GUARD];
    snprintf(key, sizeof(key), "err:%s:small", tag);
    fillPattern(want, sizeof(want), seedOf(key, 1));
    CHECK_EQ(put(c, key, want, sizeof(want), NULL), MC_OK);
    setGuard(buf, 999);
    CHECK_EQ(get(c, key, buf, 999), MC_ERR_TOO_SMALL);
    CHECK(guardIntact(buf, 999));
    CHECK_EQ(get(c, key, buf, 1), MC_ERR_TOO_SMALL);
    /* A larger buffer than needed is fine: the value's size comes back. */
    char *big = xmalloc(4096);
    CHECK(sameBytes("get into a larger buffer", big, get(c, key, big, 4096), want, sizeof(want)));
    free(big);
    CHECK(getSame(c, key, want, sizeof(want), MC_TRANSPORT_AUTO));
}

static void errNotFound(mc_client *c, const char *tag) {
    char key[64], buf[64];
    snprintf(key, sizeof(key), "err:%s:never-written", tag);
    CHECK_EQ(get(c, key, buf, sizeof(buf)), MC_ERR_NOT_FOUND);
    CHECK_EQ(mc_exists(c, key, strlen(key)), 0);
    CHECK_EQ(mc_remove(c, key, strlen(key)), 0);
    CHECK_EQ(get(c, key, buf, sizeof(buf)), MC_ERR_NOT_FOUND);
}

static void errExistsAndReplace(mc_client *c, const char *tag) {
    char key[64];
    snprintf(key, sizeof(key), "err:%s:exists", tag);
    size_t n1 = 3000, n2 = 70 * KiB + 1;
    char *v1 = xmalloc(n1), *v2 = xmalloc(n2);
    fillPattern(v1, n1, seedOf(key, n1));
    fillPattern(v2, n2, seedOf(key, n2));
    CHECK_EQ(put(c, key, v1, n1, NULL), MC_OK);
    /* Without replace: EXISTS, and the value is untouched. */
    int rc = mc_put(c, key, strlen(key), v2, n2, NULL);
    CHECK_EQ(rc, MC_ERR_EXISTS);
    mc_put_opts noreplace = {0};
    CHECK_EQ(mc_put(c, key, strlen(key), v2, n2, &noreplace), MC_ERR_EXISTS);
    CHECK(getSame(c, key, v1, n1, MC_TRANSPORT_AUTO));
    /* With replace: the new value, of another size. */
    mc_put_opts replace = {0};
    replace.replace = 1;
    CHECK_EQ(put(c, key, v2, n2, &replace), MC_OK);
    CHECK(getSame(c, key, v2, n2, MC_TRANSPORT_AUTO));
    /* And back to a smaller one. */
    CHECK_EQ(put(c, key, v1, n1, &replace), MC_OK);
    CHECK(getSame(c, key, v1, n1, MC_TRANSPORT_AUTO));
    free(v1);
    free(v2);
}

static void errExistsRemove(mc_client *c, const char *tag) {
    char key[64], v[512], buf[512];
    snprintf(key, sizeof(key), "err:%s:remove", tag);
    fillPattern(v, sizeof(v), seedOf(key, sizeof(v)));
    CHECK_EQ(put(c, key, v, sizeof(v), NULL), MC_OK);
    CHECK_EQ(mc_exists(c, key, strlen(key)), 1);
    CHECK_EQ(mc_remove(c, key, strlen(key)), 1);
    CHECK_EQ(mc_exists(c, key, strlen(key)), 0);
    CHECK_EQ(get(c, key, buf, sizeof(buf)), MC_ERR_NOT_FOUND);
    CHECK_EQ(mc_remove(c, key, strlen(key)), 0);
    /* The key can be written again afterwards, without replace. */
    CHECK_EQ(put(c, key, v, sizeof(v), NULL), MC_OK);
    CHECK(getSame(c, key, v, sizeof(v), MC_TRANSPORT_AUTO));
}

/* A server of one connection whose SCAN always answers cursor 5 and a
 * key (a broken cursor): every other command gets the error a server
 * without cluster support gives. One command per read is enough here:
 * the client waits for each reply. */
static void *scanLoopServer(void *p) {
    int fd = accept((int)(intptr_t)p, NULL, NULL);
    char buf[4096];
    ssize_t r;
    while (fd >= 0 && (r = read(fd, buf, sizeof(buf) - 1)) > 0) {
        buf[r] = '\0';
        const char *rep = strstr(buf, "SCAN") ? "*2\r\n$1\r\n5\r\n*1\r\n$3\r\nkey\r\n"
                                              : "-ERR This instance has cluster support disabled\r\n";
        if (tsWriteAll(fd, rep, strlen(rep)) != 0) break;
    }
    if (fd >= 0) close(fd);
    return NULL;
}

void testErrors(void) {
    const char *group = "errors";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    struct {
        const char *uri;
        int transport;
        const char *tag;
    } paths[] = {{s.unix_uri, MC_TRANSPORT_SHM, "shm"}, {s.tcp_uri, MC_TRANSPORT_TCP, "tcp"}};
    for (int p = 0; p < 2; p++) {
        mc_client *c = mcOpen(paths[p].uri, NULL, paths[p].transport);
        const char *tag = paths[p].tag;
        char name[160];
        snprintf(name, sizeof(name), "errors (%s): a buffer one byte short is TOO_SMALL; a larger one works", tag);
        TEST(name) {
            CHECK(c != NULL);
            if (c) errTooSmall(c, tag);
        }
        snprintf(name, sizeof(name), "errors (%s): a missing key is NOT_FOUND for get, 0 for exists and remove", tag);
        TEST(name) {
            CHECK(c != NULL);
            if (c) errNotFound(c, tag);
        }
        snprintf(name, sizeof(name), "errors (%s): put without replace is EXISTS and changes nothing; replace works",
                 tag);
        TEST(name) {
            CHECK(c != NULL);
            if (c) errExistsAndReplace(c, tag);
        }
        snprintf(name, sizeof(name), "errors (%s): mc_exists and mc_remove", tag);
        TEST(name) {
            CHECK(c != NULL);
            if (c) errExistsRemove(c, tag);
        }
        snprintf(name, sizeof(name),
                 "errors (%s): mc_register refuses a region past the end of the address space, saying why", tag);
        TEST(name) {
            CHECK(c != NULL);
            if (c) {
                static char probe[64];
                CHECK_EQ(mc_register(c, (void *)(UINTPTR_MAX - 10), 100, MC_MEM_HOST), MC_ERR_INVALID);
                CHECK(strstr(mc_last_error(c), "past the end") != NULL);
                CHECK_EQ(mc_register(c, probe, SIZE_MAX, MC_MEM_HOST), MC_ERR_INVALID);
                CHECK_EQ(mc_register(c, NULL, 10, MC_MEM_HOST), MC_ERR_INVALID);
                CHECK(strstr(mc_last_error(c), "NULL") != NULL);
                /* nothing was registered: a put_from out of it is still refused */
                CHECK_EQ(mc_put_from(c, "reg:wrap", 8, probe, sizeof(probe), NULL), MC_ERR_INVALID);
            }
        }
        mcClose(&c);
    }
    TEST("errors: a server whose SCAN cursor comes back to an earlier one fails mc_scan_keys (no endless scan)") {
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(sa);
        pthread_t t;
        int up = lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 4) == 0 &&
                 getsockname(lfd, (struct sockaddr *)&sa, &len) == 0 &&
                 pthread_create(&t, NULL, scanLoopServer, (void *)(intptr_t)lfd) == 0;
        CHECK(up);
        char uri[64];
        snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
        mc_client *c = up ? mc_connect(uri, NULL, NULL, 0) : NULL;
        CHECK(c != NULL);
        if (c) {
            mc_key *keys = (mc_key *)1;
            size_t n = 1;
            CHECK_EQ(mc_scan_keys(c, NULL, &keys, &n), MC_ERR_PROTOCOL);
            CHECK(keys == NULL && n == 0);
            CHECK(strstr(mc_last_error(c), "came back") != NULL);
        }
        mcClose(&c);
        if (up) pthread_join(t, NULL);
        if (lfd >= 0) close(lfd);
    }
    tsGroupFinish(&s, group, failed0);
}

/* ==== 4. replica fallback ========================================================= */

void testReplicaFallback(void) {
    const char *group = "replica fallback";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--owner-ttl", "60000", NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    const size_t n = 4 * MiB + 5;
    char *v = xmalloc(n);
    fillPattern(v, n, seedOf("fb:key", n));
    long long child_seg = -1;
    pid_t child = -1;
    mc_client *writer = NULL;

    TEST("replica fallback: a helper process hosts segment fb-child") {
        child = spawnHostChild(s.unix_uri, "fb-child", 16 * MiB, &child_seg);
        CHECK(child > 0);
        CHECK(child_seg > 1);
        CHECK_EQ(segInfoInt(r, "fb-child", "id"), child_seg);
    }
    TEST("replica fallback: a put with 2 replicas, preferring fb-child, puts one there and one in self") {
        writer = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(writer != NULL);
        if (writer) {
            mc_put_opts o = {0};
            o.replicas = 2;
            o.prefer = "fb-child";
            CHECK_EQ(put(writer, "fb:key", v, n, &o), MC_OK);
        }
        long long segs[4], offs[4];
        int nrep = replicaList(r, "fb:key", segs, offs, 4);
        CHECK_EQ(nrep, 2);
        /* PREFER goes first (placement.c), so a reader tries the helper's
         * replica first and the fallback is really exercised. */
        if (nrep == 2) {
            CHECK_EQ(segs[0], child_seg);
            CHECK_EQ(segs[1], 1);
        }
        CHECK(getSame(writer, "fb:key", v, n, MC_TRANSPORT_TCP));
    }
    TEST("replica fallback: mc_batch_replicas lists fb-child (its id, name, tcp endpoint) first, then self") {
        char child_tcp[300];
        segEndpoint(r, "fb-child", "tcp://", child_tcp, sizeof(child_tcp));
        mc_key key = {"fb:key", 6};
        mc_replicas d;
        int res = 0;
        CHECK_EQ(writer ? mc_batch_replicas(writer, 1, &key, &d, &res) : MC_ERR_INVALID, 1);
        CHECK_EQ(res, 2);
        CHECK(d.nreplicas == 2 && d.size == n);
        CHECK((long long)d.replicas[0].seg_id == child_seg && !strcmp(d.replicas[0].seg_name, "fb-child"));
        CHECK(child_tcp[0] && !strcmp(d.replicas[0].endpoint, child_tcp));
        CHECK(d.replicas[1].seg_id == 1 && !strcmp(d.replicas[1].seg_name, "self") && d.replicas[1].len == n);
    }
    char child_unix[300] = "";
    TEST("replica fallback: the helper's unix endpoint is an abstract socket (no file)") {
        segEndpoint(r, "fb-child", "unix://", child_unix, sizeof(child_unix));
        CHECK(!strncmp(child_unix, "unix://@mooncake-seg-", 21));
        if (strncmp(child_unix, "unix://@", 8)) fprintf(stderr, "  endpoint: '%s'\n", child_unix);
        else CHECK_EQ(abstractSocketListed(child_unix + 8), 1);
    }
    TEST("replica fallback: after SIGKILL of the helper its segment is still listed (its owner has a connection)") {
        CHECK(child > 0);
        /* Alone, the helper's closed connection would orphan its segment
         * and the probe of its endpoint would unmount it at once (owner.c).
         * r's HEARTBEAT keeps the owner connected: the server believes the
         * host lives, as it must while a host hangs unseen. */
        char owner[400] = "";
        redisReply *info = rcmd(r, "SEGMENT.INFO fb-child");
        if (info && info->type == REDIS_REPLY_ARRAY)
            for (size_t i = 0; i + 1 < info->elements; i += 2)
                if (info->element[i]->type == REDIS_REPLY_STRING && !strcmp(info->element[i]->str, "owner") &&
                    info->element[i + 1]->type == REDIS_REPLY_STRING)
                    snprintf(owner, sizeof(owner), "%s", info->element[i + 1]->str);
        freeReplyObject(info);
        CHECK(!strncmp(owner, "mc:", 3));
        CHECK(expectOk(rcmd(r, "HEARTBEAT %s", owner), "HEARTBEAT for the helper's owner"));
        if (child > 0) {
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            tsUntrack(child);
            child = -1;
        }
        tsSleepMs(50); /* the server notices the closed connection */
        CHECK_EQ(segInfoInt(r, "fb-child", "id"), child_seg);
    }
    TEST("replica fallback: the SIGKILLed helper's unix socket is gone with it, nothing left on disk") {
        /* The kernel drops an abstract name with its last descriptor: no
         * stale /tmp/mooncake-seg-*.sock per killed host, as a path left. */
        if (!strncmp(child_unix, "unix://@", 8)) CHECK_EQ(abstractSocketListed(child_unix + 8), 0);
        else CHECK(0);
    }
    TEST("replica fallback: a fresh tcp handle gets the right bytes from the surviving replica") {
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(getSame(c, "fb:key", v, n, MC_TRANSPORT_TCP));
        mcClose(&c);
    }
    TEST("replica fallback: a fresh shm handle gets the right bytes from the surviving replica") {
        mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
        CHECK(getSame(c, "fb:key", v, n, MC_TRANSPORT_SHM));
        mcClose(&c);
    }
    TEST("replica fallback: ranged reads (tcp, shm, the writer's dead data connection) come from the surviving replica") {
        char *buf = xmalloc(n);
        mc_client *hs[3] = {mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP), mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM), writer};
        for (int i = 0; i < 3; i++) {
            if (!hs[i]) {
                CHECK(hs[i] != NULL);
                continue;
            }
            CHECK_EQ(mc_register(hs[i], buf, n, MC_MEM_HOST), MC_OK);
            memset(buf, 0, n);
            /* Small ranges (one SEG.READV) and large ones, the object's end. */
            mc_range g[4] = {{buf, 0, 1000}, {buf + 1000, 1000, 3000}, {buf + 4000, 4000, 2 * MiB}, {buf + 4000 + 2 * MiB, 4000 + 2 * MiB, n - 4000 - 2 * MiB}};
            mc_kranges item = {"fb:key", 6, g, 4};
            long long res[4];
            int rc = mc_batch_get_ranges(hs[i], 1, &item, res);
            if (rc != 4) fprintf(stderr, "  handle %d: %d (%s)\n", i, rc, lastErr(hs[i]));
            CHECK_EQ(rc, 4);
            CHECK(sameBytes("fb:key in ranges", buf, rc == 4 ? (long long)n : -1, v, n));
            CHECK_EQ(mc_last_transport(hs[i]), i == 1 ? MC_TRANSPORT_SHM : MC_TRANSPORT_TCP);
            CHECK_EQ(mc_unregister(hs[i], buf), MC_OK);
        }
        mcClose(&hs[0]);
        mcClose(&hs[1]);
        free(buf);
    }
    TEST("replica fallback: the writer's handle, whose data connection died, falls back too") {
        CHECK(getSame(writer, "fb:key", v, n, MC_TRANSPORT_TCP));
        /* And again: a failed replica must not break the handle for good. */
        CHECK(getSame(writer, "fb:key", v, n, MC_TRANSPORT_TCP));
    }
    TEST("replica fallback: a batch put with items on the dead helper revokes those, publishes the rest") {
        /* Items preferring fb-child fail their transfer (SEG.WRITEV to a
         * dead listener) and must be revoked: no key, no pending put. */
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        char a[4096], b[4096];
        fillPattern(a, sizeof(a), seedOf("fb:b0", sizeof(a)));
        fillPattern(b, sizeof(b), seedOf("fb:b1", sizeof(b)));
        mc_kv items[2] = {{"fb:b0", 5, a, sizeof(a)}, {"fb:b1", 5, b, sizeof(b)}};
        int results[2] = {1, 1};
        mc_put_opts o = {0};
        o.prefer = "fb-child";
        if (c) {
            CHECK_EQ(mc_batch_put(c, 2, items, &o, results), 0);
            CHECK(results[0] < 0 && results[1] < 0);
            CHECK_EQ(mc_exists(c, "fb:b0", 5), 0);
            CHECK_EQ(mc_exists(c, "fb:b1", 5), 0);
            redisReply *rep = rcmd(r, "OBJECT.INFO fb:b0");
            CHECK(rep && rep->type == REDIS_REPLY_NIL);
            freeReplyObject(rep);
            /* Placed in self, the same batch goes through (no stale pending
             * put is left to refuse it with EXISTS). */
            o.prefer = "self";
            CHECK_EQ(mc_batch_put(c, 2, items, &o, results), 2);
            for (int i = 0; i < 2; i++)
                if (results[i] != MC_OK) fprintf(stderr, "  item %d: %s (%s)\n", i, mc_strerror(results[i]), lastErr(c));
            CHECK(getSame(c, "fb:b1", b, sizeof(b), MC_TRANSPORT_TCP));
        } else {
            CHECK(c != NULL);
        }
        mcClose(&c);
    }
    mcClose(&writer);
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        tsUntrack(child);
    }
    rClose(&r);
    free(v);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 5. lease expiry ================================================================ */

/* One 64 MiB get with a 1 ms lease: LEASE_EXPIRED is right; bytes are
 * acceptable only if the read really ended within about the lease. */
static void leaseExpires(mc_client *c, const char *key, size_t n, char *buf) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    for (int attempt = 0; attempt < 4; attempt++) {
        double t0 = tsNowSec();
        long long got = get(c, key, buf, n);
        double ms = (tsNowSec() - t0) * 1000.0;
        if (got == MC_ERR_LEASE_EXPIRED) return;
        if (got == (long long)n) {
            if (ms > 2.0) {
                fprintf(stderr, "  mc_get of %zu bytes took %.1f ms with a 1 ms lease, yet returned the bytes\n", n,
                        ms);
                CHECK_EQ(got, MC_ERR_LEASE_EXPIRED);
                return;
            }
            continue; /* improbably fast: try again */
        }
        fprintf(stderr, "  mc_get: %lld %s (%s) after %.1f ms\n", got, mc_strerror((int)got), lastErr(c), ms);
        CHECK_EQ(got, MC_ERR_LEASE_EXPIRED);
        return;
    }
}

void testLeaseExpiry(void) {
    const char *group = "lease expiry";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "1", "--segment-size", "128mb", NULL), &s, group)) return;
    const size_t n = 64 * MiB;
    char *v = xmalloc(n), *buf = xmalloc(n);
    fillPattern(v, n, seedOf("lease:big", n));
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    TEST("lease expiry: put 64 MiB") {
        CHECK(ctcp != NULL);
        if (ctcp) CHECK_EQ(put(ctcp, "lease:big", v, n, NULL), MC_OK);
    }
    TEST("lease expiry: a 64 MiB get over tcp that outlives a 1 ms lease is LEASE_EXPIRED") {
        leaseExpires(ctcp, "lease:big", n, buf);
    }
    TEST("lease expiry: a 64 MiB get over shm that outlives a 1 ms lease is LEASE_EXPIRED") {
        leaseExpires(cshm, "lease:big", n, buf);
    }
    TEST("lease expiry: a ranged read of 64 MiB in 4 ranges that outlives a 1 ms lease is LEASE_EXPIRED in each") {
        for (int p = 0; p < 2; p++) {
            mc_client *c = p ? cshm : ctcp;
            if (!c || mc_register(c, buf, n, MC_MEM_HOST) != MC_OK) {
                CHECK(0);
                continue;
            }
            size_t q = n / 4;
            mc_range g[4] = {{buf, 0, q}, {buf + q, q, q}, {buf + 2 * q, 2 * q, q}, {buf + 3 * q, 3 * q, n - 3 * q}};
            mc_kranges item = {"lease:big", 9, g, 4};
            for (int attempt = 0; attempt < 4; attempt++) {
                long long res[4];
                double t0 = tsNowSec();
                int rc = mc_batch_get_ranges(c, 1, &item, res);
                double ms = (tsNowSec() - t0) * 1000.0;
                if (rc == 4 && ms <= 2.0) continue; /* improbably fast: try again */
                CHECK_EQ(rc, 0);
                for (int i = 0; i < 4; i++) CHECK_EQ(res[i], MC_ERR_LEASE_EXPIRED);
                if (rc != 0) fprintf(stderr, "  %s: %d ranges read in %.1f ms with a 1 ms lease\n", transportName(p ? MC_TRANSPORT_SHM : MC_TRANSPORT_TCP), rc, ms);
                break;
            }
            CHECK_EQ(mc_unregister(c, buf), MC_OK);
        }
    }
    TEST("lease expiry: with lease-ttl 10000 again the same gets return the bytes") {
        redisContext *r = rTcp(&s);
        CHECK(expectOk(rcmd(r, "CONFIG SET lease-ttl 10000"), "CONFIG SET lease-ttl"));
        rClose(&r);
        CHECK(getSame(ctcp, "lease:big", v, n, MC_TRANSPORT_TCP));
        CHECK(getSame(cshm, "lease:big", v, n, MC_TRANSPORT_SHM));
    }
    mcClose(&ctcp);
    mcClose(&cshm);
    free(v);
    free(buf);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 10. interop with plain Redis clients ======================================================= */

void testInterop(void) {
    const char *group = "interop";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    const size_t sizes[] = {10, 1 * MiB};
    char *v = xmalloc(MiB);

    TEST("interop: mc_put (shm and tcp) of 10 B and 1 MiB, then a plain GET returns the same bytes") {
        CHECK(r != NULL && cshm != NULL && ctcp != NULL);
        for (size_t i = 0; i < 2 && r && cshm && ctcp; i++) {
            char key[64];
            snprintf(key, sizeof(key), "io:mc:shm:%zu", sizes[i]);
            fillPattern(v, sizes[i], seedOf(key, sizes[i]));
            CHECK_EQ(put(cshm, key, v, sizes[i], NULL), MC_OK);
            CHECK(redisGetSame(r, key, v, sizes[i]));
            snprintf(key, sizeof(key), "io:mc:tcp:%zu", sizes[i]);
            fillPattern(v, sizes[i], seedOf(key, sizes[i]));
            CHECK_EQ(put(ctcp, key, v, sizes[i], NULL), MC_OK);
            CHECK(redisGetSame(r, key, v, sizes[i]));
            redisReply *l = rcmd(r, "STRLEN %s", key);
            CHECK_EQ(replyInt(l), (long long)sizes[i]);
            freeReplyObject(l);
        }
    }
    TEST("interop: SET of 10 B and 1 MiB, then mc_get over shm and over tcp returns the same bytes") {
        for (size_t i = 0; i < 2 && r; i++) {
            char key[64];
            snprintf(key, sizeof(key), "io:set:%zu", sizes[i]);
            fillPattern(v, sizes[i], seedOf(key, sizes[i]));
            CHECK(expectOk(rcmd(r, "SET %s %b", key, v, sizes[i]), "SET"));
            CHECK(getSame(cshm, key, v, sizes[i], MC_TRANSPORT_SHM));
            CHECK(getSame(ctcp, key, v, sizes[i], MC_TRANSPORT_TCP));
        }
    }
    TEST("interop: mc_exists and mc_remove see SET keys; DEL is seen by mc_get") {
        CHECK_EQ(mc_exists(ctcp, "io:set:10", 9), 1);
        CHECK_EQ(mc_remove(ctcp, "io:set:10", 9), 1);
        redisReply *e = rcmd(r, "EXISTS io:set:10");
        CHECK_EQ(replyInt(e), 0);
        freeReplyObject(e);
        freeReplyObject(rcmd(r, "DEL io:mc:tcp:10"));
        char buf[16];
        CHECK_EQ(get(cshm, "io:mc:tcp:10", buf, sizeof(buf)), MC_ERR_NOT_FOUND);
    }
    free(v);
    mcClose(&cshm);
    mcClose(&ctcp);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== lease release: a get ends its read lease when it is done ================================== */

void testLeaseRelease(void) {
    const char *group = "lease-release";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    char *v = xmalloc(MiB), *got = xmalloc(MiB);
    fillPattern(v, MiB, 11);
    TEST("lease release: after mc_get (shm and tcp) the object's lease has ended") {
        CHECK(r && cshm && ctcp);
        CHECK_EQ(put(cshm, "lr:a", v, MiB, NULL), MC_OK);
        CHECK_EQ(mc_get(cshm, "lr:a", 4, got, MiB), (long long)MiB);
        CHECK(leaseEndsWithin(r, "lr:a", 2000));
        CHECK_EQ(mc_get(ctcp, "lr:a", 4, got, MiB), (long long)MiB);
        CHECK(leaseEndsWithin(r, "lr:a", 2000));
        CHECK(memcmp(got, v, MiB) == 0);
        /* The discarded replies do not confuse the next command's. */
        CHECK_EQ(mc_size(ctcp, "lr:a", 4), (long long)MiB);
        CHECK_EQ(mc_exists(ctcp, "lr:a", 4), 1);
    }
    TEST("lease release: a batch get ends every lease it was granted") {
        mc_kv items[8];
        long long res[8];
        char keys[8][16], *bufs = xmalloc(8 * 4096);
        for (int i = 0; i < 8; i++) {
            snprintf(keys[i], sizeof(keys[i]), "lr:b%d", i);
            CHECK_EQ(put(ctcp, keys[i], v, 4096, NULL), MC_OK);
            items[i] = (mc_kv){keys[i], strlen(keys[i]), bufs + i * 4096, 4096};
        }
        CHECK_EQ(mc_batch_get(cshm, 8, items, res), 8);
        for (int i = 0; i < 8; i++) CHECK(leaseEndsWithin(r, keys[i], 2000));
        free(bufs);
    }
    TEST("lease release: mc_set_lease_release(c, 0) keeps the lease to lease-ttl") {
        CHECK_EQ(mc_set_lease_release(ctcp, 0), MC_OK);
        CHECK_EQ(mc_get(ctcp, "lr:a", 4, got, MiB), (long long)MiB);
        CHECK(mc_exists(ctcp, "lr:a", 4) == 1); /* a round trip after the get */
        long long ms = leaseMs(r, "lr:a");
        CHECK(ms > 9000 && ms <= 10000);
        CHECK_EQ(mc_set_lease_release(ctcp, 1), MC_OK);
    }
    free(v);
    free(got);
    mcClose(&cshm);
    mcClose(&ctcp);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}
