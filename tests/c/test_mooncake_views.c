/* test_mooncake_views.c -- zero-copy views (mc_batch_get_views): objects
 * read where they lie, under a hold.
 *
 *  - views of pool objects and of an object in a segment another handle
 *    hosts: byte-exact, the size, one hold each while they live and none
 *    once released (the release goes out with the handle's next request);
 *    a missing and a pending key fail alone;
 *  - a view's bytes stay the object's after the key is removed, past
 *    lease-ttl, while puts of the same size reuse the pool (without the
 *    hold they would be overwritten: the same sequence read through a lease
 *    that ran out is the control);
 *  - no shared memory path (a tcp-only handle): MC_ERR_UNSUPPORTED, and
 *    the hold given back;
 *  - a view outlives mc_close: still mapped, still the object's bytes; the
 *    holds end with the connection;
 *  - 4096 holds per connection: the 4097th view is refused alone;
 *  - invalid arguments.
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main()).
 */
#include "test_mooncake.h"

#define VW_LEN (256 * KiB)

/* INFO store's field, -1 if absent. */
static long long storeInfo(redisContext *r, const char *field) {
    redisReply *rep = r ? rcmd(r, "INFO store") : NULL;
    long long v = infoField(rep, field);
    if (rep) freeReplyObject(rep);
    return v;
}

/* Releases reach the server without a reply awaited: poll, up to 2 s. */
static int holdsBecome(redisContext *r, long long want) {
    for (int i = 0; i < 200; i++) {
        if (storeInfo(r, "store_holds") == want) return 1;
        usleep(10 * 1000);
    }
    fprintf(stderr, "  store_holds is %lld, not %lld\n", storeInfo(r, "store_holds"), want);
    return 0;
}

static mc_key keyOf(const char *k) { return (mc_key){k, strlen(k)}; }

/* A released view's HOLD.RELEASE goes out with its handle's next request:
 * make one. */
static void nextRequest(mc_client *c) { CHECK_EQ(mc_exists(c, "vw:poke", 7), 0); }

void testViews(void) {
    const char *group = "views";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", "--segment-size", "16mb", NULL), &s, group)) return;
    redisContext *r = rTcp(&s), *rp = rTcp(&s);
    mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    mc_client *host = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_AUTO);
    char *a = xmalloc(VW_LEN), *b = xmalloc(VW_LEN), *h = xmalloc(VW_LEN);
    fillPattern(a, VW_LEN, seedOf("vw:a", VW_LEN));
    fillPattern(b, VW_LEN, seedOf("vw:b", VW_LEN));
    fillPattern(h, VW_LEN, seedOf("vw:h", VW_LEN));

    TEST("views: pool objects and a hosted segment's, byte-exact, one hold each while they live") {
        CHECK(r && rp && c && ctcp && host);
        if (!r || !rp || !c || !ctcp || !host) break;
        CHECK_EQ(put(c, "vw:a", a, VW_LEN, NULL), MC_OK);
        CHECK_EQ(put(c, "vw:b", b, VW_LEN, NULL), MC_OK);
        CHECK_EQ(mc_mount(host, 4 * MiB, "vw-host"), MC_OK);
        mc_put_opts o = {0};
        o.prefer = "vw-host";
        CHECK_EQ(put(c, "vw:h", h, VW_LEN, &o), MC_OK);
        redisReply *p = rcmd(rp, "PUT.START vw:pending 100");
        CHECK(p && p->type == REDIS_REPLY_ARRAY);
        if (p) freeReplyObject(p);
        mc_key keys[5] = {keyOf("vw:a"), keyOf("vw:missing"), keyOf("vw:b"), keyOf("vw:pending"), keyOf("vw:h")};
        mc_view *v[5];
        long long res[5];
        CHECK_EQ(mc_batch_get_views(c, 5, keys, v, res), 3);
        CHECK_EQ(res[0], VW_LEN);
        CHECK_EQ(res[1], MC_ERR_NOT_FOUND);
        CHECK_EQ(res[2], VW_LEN);
        CHECK_EQ(res[3], MC_ERR_NOT_READY);
        CHECK_EQ(res[4], VW_LEN);
        CHECK(v[1] == NULL && v[3] == NULL);
        CHECK(v[0] && v[2] && v[4]);
        if (!v[0] || !v[2] || !v[4]) break;
        CHECK_EQ((long long)mc_view_size(v[0]), VW_LEN);
        CHECK(sameBytes("vw:a", mc_view_data(v[0]), VW_LEN, a, VW_LEN));
        CHECK(sameBytes("vw:b", mc_view_data(v[2]), VW_LEN, b, VW_LEN));
        CHECK(sameBytes("vw:h", mc_view_data(v[4]), VW_LEN, h, VW_LEN));
        CHECK_EQ(storeInfo(r, "store_holds"), 3);
        mc_view_release(v[2]);
        nextRequest(c);
        CHECK(holdsBecome(r, 2));
        mc_view_release(v[0]);
        mc_view_release(v[4]);
        nextRequest(c);
        CHECK(holdsBecome(r, 0));
    }

    TEST("views: a view's bytes stay the object's after DEL, past lease-ttl, while puts reuse the pool") {
        if (!r || !c) break;
        redisReply *x = rcmd(r, "CONFIG SET lease-ttl 100");
        freeReplyObject(x);
        mc_key k = keyOf("vw:a");
        mc_view *v = NULL;
        long long res = 0;
        CHECK_EQ(mc_batch_get_views(c, 1, &k, &v, &res), 1);
        CHECK(v != NULL);
        if (v == NULL) break;
        x = rcmd(r, "DEL vw:a vw:b");
        CHECK_EQ(replyInt(x), 2);
        freeReplyObject(x);
        usleep(300 * 1000); /* lease-ttl is long over */
        /* Fill the pool with other bytes, twice over: every free extent is written. */
        int puts = 0;
        for (int i = 0; i < (int)(2 * 16 * MiB / VW_LEN); i++) {
            char key[32];
            snprintf(key, sizeof(key), "vw:fill:%d", i % 40);
            mc_put_opts o = {0};
            o.replace = 1;
            puts += put(c, key, b, VW_LEN, &o) == MC_OK;
        }
        CHECK(puts > 40);
        CHECK(sameBytes("vw:a held", mc_view_data(v), VW_LEN, a, VW_LEN));
        mc_view_release(v);
        nextRequest(c);
        CHECK(holdsBecome(r, 0));
        x = rcmd(r, "CONFIG SET lease-ttl 10000");
        freeReplyObject(x);
    }

    TEST("views: no shared memory path (tcp only): MC_ERR_UNSUPPORTED, the hold given back") {
        if (!r || !ctcp) break;
        CHECK_EQ(put(ctcp, "vw:t", a, VW_LEN, NULL), MC_OK);
        mc_key k = keyOf("vw:t");
        mc_view *v = (mc_view *)1;
        long long res = 0;
        CHECK_EQ(mc_batch_get_views(ctcp, 1, &k, &v, &res), 0);
        CHECK_EQ(res, MC_ERR_UNSUPPORTED);
        CHECK(v == NULL);
        CHECK(holdsBecome(r, 0));
    }

    TEST("views: a view outlives mc_close (still mapped, the same bytes); the holds end with the connection") {
        if (!r) break;
        mc_client *k2 = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(k2 != NULL);
        if (!k2) break;
        CHECK_EQ(put(k2, "vw:c", h, VW_LEN, NULL), MC_OK);
        mc_key k = keyOf("vw:c");
        mc_view *v = NULL;
        long long res = 0;
        CHECK_EQ(mc_batch_get_views(k2, 1, &k, &v, &res), 1);
        CHECK_EQ(storeInfo(r, "store_holds"), 1);
        mcClose(&k2);
        CHECK(holdsBecome(r, 0));
        if (v) CHECK(sameBytes("vw:c after close", mc_view_data(v), VW_LEN, h, VW_LEN));
        mc_view_release(v); /* dropped: the handle is gone */
    }

    TEST("views: 4096 holds per connection; the 4097th view is refused alone, and all come back") {
        if (!r || !c) break;
        CHECK_EQ(put(c, "vw:s", "tiny", 4, NULL), MC_OK);
        enum { N = 4097 };
        mc_key *keys = xmalloc(N * sizeof(*keys));
        mc_view **v = xmalloc(N * sizeof(*v));
        long long *res = xmalloc(N * sizeof(*res));
        for (int i = 0; i < N; i++) keys[i] = keyOf("vw:s");
        CHECK_EQ(mc_batch_get_views(c, N, keys, v, res), N - 1);
        CHECK_EQ(res[0], 4);
        CHECK_EQ(res[N - 1], MC_ERR_SERVER);
        CHECK(v[N - 1] == NULL);
        CHECK_EQ(storeInfo(r, "store_holds"), N - 1);
        for (int i = 0; i < N; i++) mc_view_release(v[i]);
        nextRequest(c);
        CHECK(holdsBecome(r, 0));
        free(keys);
        free(v);
        free(res);
    }

    TEST("views: invalid arguments") {
        mc_key k = keyOf("vw:s"), empty = {"", 0};
        mc_view *v = NULL;
        long long res = 0;
        CHECK_EQ(mc_batch_get_views(NULL, 1, &k, &v, &res), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_get_views(c, 1, NULL, &v, &res), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_get_views(c, 1, &k, NULL, &res), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_get_views(c, 0, NULL, NULL, NULL), 0);
        CHECK_EQ(mc_batch_get_views(c, 1, &empty, &v, &res), MC_ERR_INVALID);
        CHECK(v == NULL);
        CHECK(mc_view_data(NULL) == NULL && mc_view_size(NULL) == 0);
        mc_view_release(NULL);
    }

    mcClose(&c);
    mcClose(&ctcp);
    mcClose(&host);
    rClose(&r);
    rClose(&rp);
    free(a);
    free(b);
    free(h);
    tsGroupFinish(&s, group, failed0);
}
