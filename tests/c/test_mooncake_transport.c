/* test_mooncake_transport.c -- how the bytes move: parallel tcp streams and
 * the shared-memory pool mapped at attach.
 *
 *  - streams: mc_set_streams' bounds; 1 to 4 streams put and get 256 KiB ..
 *    16 MiB byte for byte, values written with one count read with another,
 *    at most streams-1 worker connections, a refused slice failing the put
 *    whole, streams into a segment a client hosts, mc_set_timeouts reaching
 *    the data and stream connections already open.
 *  - first-touch: after the first shm put, puts into fresh pool space take
 *    no page faults (counted, not timed): the pool is mapped once, populated.
 *
 * Together because both measure the data plane's mechanics rather than a
 * call's result: connection counts and page faults.
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main();
 * test_mooncake.h: the shared helpers).
 */
#include "test_mooncake.h"

/* ==== 12. parallel tcp streams ================================================== */

/* connected_clients from INFO clients, -1 if it cannot be read. */
static long long connectedClients(redisContext *r) {
    redisReply *rep = rcmd(r, "INFO clients");
    long long n = -1;
    if (rep && rep->type == REDIS_REPLY_STRING) {
        const char *p = strstr(rep->str, "connected_clients:");
        if (p) n = atoll(p + strlen("connected_clients:"));
    }
    freeReplyObject(rep);
    return n;
}

void testStreams(void) {
    const char *group = "streams";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "256mb", NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    const size_t max = 16 * MiB;
    char *want = xmalloc(max), *got = xmalloc(max + GUARD);
    /* Around the slice boundaries: below one slice, exactly two, odd tails. */
    static const size_t sizes[] = {256 * KiB, 512 * KiB, 512 * KiB + 1, 1 * MiB + 4097, 5 * MiB + 12345, 16 * MiB};
    mc_client *c = NULL;

    TEST("streams: mc_set_streams refuses 0 and 17, takes 1 and 16") {
        c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(c != NULL);
        CHECK_EQ(mc_set_streams(c, 0), MC_ERR_INVALID);
        CHECK_EQ(mc_set_streams(c, 17), MC_ERR_INVALID);
        CHECK_EQ(mc_set_streams(c, 16), MC_OK);
        CHECK_EQ(mc_set_streams(c, 1), MC_OK);
        CHECK_EQ(mc_set_streams(NULL, 2), MC_ERR_INVALID);
    }
    TEST("streams: by default one stream to an unpaced same-host server (no worker connections)") {
        mc_client *e = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(e != NULL);
        long long before = connectedClients(r); /* r, c, e */
        CHECK_EQ(before, 3);
        if (e) roundTrip(e, "stdef", 16 * MiB, MC_TRANSPORT_TCP, want, got);
        CHECK_EQ(connectedClients(r), before);
        mcClose(&e);
    }
    static const int counts[] = {1, 2, 3, 4};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        char name[160], tag[16];
        snprintf(tag, sizeof(tag), "st%d", counts[k]);
        snprintf(name, sizeof(name), "streams: %d stream(s), put/get of 256 KiB .. 16 MiB byte for byte", counts[k]);
        TEST(name) {
            if (c) CHECK_EQ(mc_set_streams(c, counts[k]), MC_OK);
            for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
                roundTrip(c, tag, sizes[i], MC_TRANSPORT_TCP, want, got);
        }
    }
    TEST("streams: a value written with 4 streams reads back with 1, and the other way round") {
        if (c) {
            CHECK_EQ(mc_set_streams(c, 1), MC_OK);
            char key[64];
            rtKey(key, sizeof(key), "st4", 5 * MiB + 12345);
            fillPattern(want, 5 * MiB + 12345, seedOf(key, 5 * MiB + 12345));
            CHECK(getSame(c, key, want, 5 * MiB + 12345, MC_TRANSPORT_TCP));
            CHECK_EQ(mc_set_streams(c, 4), MC_OK);
            rtKey(key, sizeof(key), "st1", 5 * MiB + 12345);
            fillPattern(want, 5 * MiB + 12345, seedOf(key, 5 * MiB + 12345));
            CHECK(getSame(c, key, want, 5 * MiB + 12345, MC_TRANSPORT_TCP));
        }
    }
    long long conns = -1; /* r, c's metadata connection and its workers' */
    TEST("streams: 4 streams use the metadata connection and at most 3 worker connections") {
        /* This hiredis connection, c's metadata connection and 1 to 3
         * workers': whichever worker is awake claims the next slice
         * (mc_tcp.c), so on a busy machine one worker may have carried the
         * slices of several, and opened the only worker connection. */
        conns = connectedClients(r);
        CHECK(conns >= 3 && conns <= 5);
    }
    TEST("streams: a slice refused (maxclients reached) fails the put, revokes it, leaves no key") {
        mc_client *d = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(d != NULL);
        long long now = connectedClients(r);
        CHECK_EQ(now, conns + 1);
        redisReply *rep = rcmd(r, "CONFIG SET maxclients %lld", now);
        CHECK(expectOk(rep, "CONFIG SET maxclients"));
        if (d) {
            CHECK_EQ(mc_set_streams(d, 4), MC_OK);
            fillPattern(want, 4 * MiB, seedOf("st:refused", 4));
            /* mc_put, not put(): the failure is the point, and put()'s
             * "write: Broken pipe (put revoked)" on stderr read as a fault
             * of whatever failed next in a run (issue 25). */
            int rc = mc_put(d, "st:refused", 10, want, 4 * MiB, NULL);
            CHECK(rc < 0);
            if (rc >= 0) fprintf(stderr, "  put succeeded although its workers cannot connect\n");
            /* Why, whether the worker's SEG.WRITE met the closed socket
             * (EPIPE: the refusal line is what the peer wrote before
             * closing) or was all sent and read the refusal as its reply. */
            CHECK(strstr(lastErr(d), "(put revoked)") != NULL);
            CHECK(strstr(lastErr(d), "max number of clients reached") != NULL);
            if (!strstr(lastErr(d), "max number of clients reached")) fprintf(stderr, "  (%s)\n", lastErr(d));
            /* And the server's log says so too (verbose, as tests run it). */
            CHECK(tsLogHas(&s, "max number of clients reached"));
            CHECK_EQ(mc_exists(d, "st:refused", 10), 0);
            rep = rcmd(r, "EXISTS st:refused");
            CHECK_EQ(replyInt(rep), 0);
            freeReplyObject(rep);
        }
        rep = rcmd(r, "CONFIG SET maxclients 10000");
        CHECK(expectOk(rep, "CONFIG SET maxclients back"));
        if (d) {
            CHECK_EQ(put(d, "st:refused", want, 4 * MiB, NULL), MC_OK);
            CHECK(getSame(d, "st:refused", want, 4 * MiB, MC_TRANSPORT_TCP));
        }
        mcClose(&d);
    }
    TEST("streams: 4 streams into a segment hosted by a client (thread per connection)") {
        mc_client *host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(host != NULL);
        int rc = host ? mc_mount(host, 64 * MiB, "host-a") : MC_ERR_INVALID;
        CHECK_EQ(rc, MC_OK);
        if (c && rc == MC_OK) {
            CHECK_EQ(mc_set_streams(c, 4), MC_OK);
            hostedPutGet(c, r, "st:hosted", 8 * MiB + 5, MC_TRANSPORT_TCP, mc_mount_id(host));
        }
        mcClose(&host);
    }
    TEST("streams: mc_set_timeouts reaches the data and worker connections already open (a stopped host)") {
        /* They kept the I/O timeout they were opened with: a handle whose
         * timeout was shortened to 300 ms after its first transfer waited
         * the library's 30 s on a stopped host, in every stream. */
        long long seg = -1;
        pid_t child = spawnHostChild(s.unix_uri, "st-stopped", 32 * MiB, &seg);
        CHECK(child > 0);
        mc_client *d = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        CHECK(d != NULL);
        if (child > 0 && d) {
            mc_put_opts o = {0};
            o.prefer = "st-stopped";
            fillPattern(want, 8 * MiB, seedOf("st:stopped", 8 * MiB));
            CHECK_EQ(mc_set_streams(d, 4), MC_OK);
            /* Opens the data connection to the host and the workers'. */
            CHECK_EQ(put(d, "st:stopped", want, 8 * MiB, &o), MC_OK);
            CHECK(getSame(d, "st:stopped", want, 8 * MiB, MC_TRANSPORT_TCP));
            CHECK_EQ(mc_set_timeouts(d, 2000, 300), MC_OK);
            kill(child, SIGSTOP);
            long long t0 = tsNowMs();
            CHECK_EQ(mc_get(d, "st:stopped", 10, got, 8 * MiB), MC_ERR_IO);
            long long took = tsNowMs() - t0;
            CHECK(took < 10000); /* 300 ms and a few waits; 30 s before */
            if (took >= 10000) fprintf(stderr, "  the get took %lld ms (%s)\n", took, lastErr(d));
            CHECK(strstr(lastErr(d), "timed out") != NULL);
            kill(child, SIGCONT);
        }
        mcClose(&d);
        if (child > 0) {
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            tsUntrack(child);
        }
    }
    mcClose(&c);
    rClose(&r);
    free(want);
    free(got);
    tsGroupFinish(&s, group, failed0);
}

/* ==== first touch: the pool's pages are populated by the chunk, before the copy ================== */

static long minorFaults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* A shm client's mapping of the pool is shared by the process and filled
 * 2 MiB at a time before a copy touches it (mc_shm.c, MADV_POPULATE_READ),
 * so puts into regions it never touched take no page faults in the copy.
 * Counting faults, not timing: 16 puts of 1 MiB into fresh pool space would
 * take 4096 faults of 4 KiB pages if the mapping were left to fill on first
 * touch. The populate's own faults count too (getrusage counts a GUP's),
 * and how many it takes depends on the server: pages it has pre-faulted
 * are mapped 64 KiB per fault (fault-around), pages it has not yet are
 * allocated one per fault. So the test waits for the server's background
 * pre-fault to finish first: under load it lagged, and the same puts took
 * 289 faults or 1321 by the race (failing 1 run in 3 beside CPU hogs). */
static int poolPrefaulted(const tsServer *s) {
    redisContext *r = rTcp(s);
    redisReply *i = r ? rcmd(r, "INFO store") : NULL;
    int done = i && infoField(i, "store_pool_prefaulted") == infoField(i, "store_pool_size") &&
               infoField(i, "store_pool_size") > 0;
    if (i) freeReplyObject(i);
    if (r) redisFree(r);
    return done;
}

void testFirstTouch(void) {
    const char *group = "first-touch";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "64mb", NULL), &s, group)) return;
    mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    char *v = xmalloc(MiB);
    fillPattern(v, MiB, 7);
    TEST("first touch: after the first shm put, 16 puts of 1 MiB into fresh pool space fault no pages") {
        CHECK(c != NULL);
        CHECK_EQ(put(c, "ft:first", v, MiB, NULL), MC_OK);
        CHECK_EQ(mc_last_transport(c), MC_TRANSPORT_SHM);
        for (int t = 0; t < 3000 && !poolPrefaulted(&s); t++) tsSleepMs(10);
        CHECK(poolPrefaulted(&s));
        long before = minorFaults();
        for (int i = 0; i < 16 && c; i++) {
            char key[32];
            snprintf(key, sizeof(key), "ft:%d", i);
            CHECK_EQ(put(c, key, v, MiB, NULL), MC_OK);
        }
        long faults = minorFaults() - before;
#if defined(__SANITIZE_THREAD__)
        /* ThreadSanitizer's shadow of the 16 MiB faults in page by page
         * under the copy: the count says nothing about the pool here. */
        (void)faults;
#else
        if (faults >= 1024) fprintf(stderr, "  %ld minor faults in 16 MiB of puts\n", faults);
        CHECK(faults < 1024);
#endif
        CHECK(getSame(c, "ft:15", v, MiB, MC_TRANSPORT_SHM));
    }
    free(v);
    mcClose(&c);
    tsGroupFinish(&s, group, failed0);
}
