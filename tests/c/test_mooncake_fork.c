/* test_mooncake_fork.c -- handles across fork(): a child must never touch
 * what its parent's handles hold on the server.
 *
 * Inference engines fork (vLLM's multiproc workers, multiprocessing's
 * 'fork', DataLoader workers), and the child inherits every handle: its
 * sockets are the parent's sockets, its hosted segment the parent's
 * segment. A child that used one interleaved its requests with the
 * parent's on one connection (replies read by the wrong process), and one
 * that closed it sent UNMOUNT, PUT.REVOKE and HOLD.RELEASE on the parent's
 * connection. Here a parent keeps putting and getting on its handle while
 * a forked child uses the inherited handles every way it can (single and
 * batch calls, views, a put session, an async op, the hosted segment),
 * then closes them and exits normally:
 *
 *  - in the child every call on an inherited handle (and on the ops and
 *    views it gave out) fails at once with MC_ERR_INVALID, mc_last_error
 *    saying the handle belongs to another process; closing them returns
 *    (no thread joined that the child does not have); a handle the child
 *    opens itself works;
 *  - in the parent every put and get stayed byte-exact, the hosted segment
 *    is still mounted and takes replicas, the pending put is still the
 *    parent's to write and end, the view's hold still stands, and its
 *    async worker still runs.
 *
 * Every wait is bounded: a child that hangs (as one did joining threads it
 * does not have) is killed and reported.
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main()).
 */
#include "test_mooncake.h"

#define FK_LEN (64 * KiB)
#define FK_CHILD_CALLS 40

static mc_key fkKey(const char *k) { return (mc_key){k, strlen(k)}; }

/* The child's side; its exit status is the number of checks that failed. */
static int forkChild(const tsServer *s, mc_client *c, mc_client *host, mc_view *view, mc_put_session *sess,
                     mc_op *op) {
    int bad = 0;
    char *buf = xmalloc(FK_LEN);
    fillPattern(buf, FK_LEN, seedOf("fk:child-value", FK_LEN));
#define FK_EXPECT(cond, what)                                                   \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "  child: %s\n", what);                             \
            bad++;                                                              \
        }                                                                       \
    } while (0)
    for (int i = 0; i < FK_CHILD_CALLS; i++) {
        char key[64];
        snprintf(key, sizeof(key), "fk:c%d", i);
        FK_EXPECT(mc_put(c, key, strlen(key), buf, FK_LEN, NULL) == MC_ERR_INVALID, "mc_put on an inherited handle");
        FK_EXPECT(mc_get(c, "fk:seed", 7, buf, FK_LEN) == MC_ERR_INVALID, "mc_get on an inherited handle");
        FK_EXPECT(mc_exists(host, "fk:seed", 7) == MC_ERR_INVALID, "mc_exists on an inherited handle");
        mc_key k = fkKey("fk:seed");
        int eres;
        FK_EXPECT(mc_batch_exists(c, 1, &k, 0, &eres) == MC_ERR_INVALID, "mc_batch_exists on an inherited handle");
    }
    FK_EXPECT(strstr(mc_last_error(c), "another process") != NULL, "mc_last_error names the other process");
    if (strstr(mc_last_error(c), "another process") == NULL) fprintf(stderr, "  child: said '%s'\n", mc_last_error(c));
    mc_key k = fkKey("fk:seed");
    mc_view *v2 = NULL;
    long long vres;
    FK_EXPECT(mc_batch_get_views(c, 1, &k, &v2, &vres) == MC_ERR_INVALID && v2 == NULL,
              "mc_batch_get_views on an inherited handle");
    FK_EXPECT(mc_view_data(view) == NULL, "an inherited view's data (its hold is the parent's)");
    mc_view_release(view);                      /* must not reach the parent's connection... */
    FK_EXPECT(mc_exists(c, "fk:seed", 7) == MC_ERR_INVALID, "a request after the release"); /* ...nor go with this */
    int sres = 0;
    FK_EXPECT(mc_put_session_revoke(c, 1, &sess, &sres) == MC_ERR_INVALID && sres == MC_ERR_INVALID,
              "mc_put_session_revoke on an inherited handle");
    FK_EXPECT(mc_op_wait(op, -1) == MC_ERR_INVALID, "mc_op_wait on an inherited op");
    mc_op_free(op);
    mc_kvv kv = {"fk:c-async", 10, &(struct iovec){buf, FK_LEN}, 1};
    FK_EXPECT(mc_batch_put_async(c, 1, &kv, NULL) == NULL, "mc_batch_put_async on an inherited handle");
    FK_EXPECT(mc_unmount(host) == MC_ERR_INVALID, "mc_unmount on an inherited handle");
    FK_EXPECT(mc_mount_id(host) == MC_ERR_INVALID, "mc_mount_id on an inherited handle");
    mc_close(host);
    mc_close(c);
    /* A handle of the child's own works. */
    char err[256] = "";
    mc_client *mine = mc_connect(s->tcp_uri, NULL, err, sizeof(err));
    FK_EXPECT(mine != NULL, "a new handle in the child");
    if (mine) {
        FK_EXPECT(mc_put(mine, "fk:child", 8, buf, FK_LEN, NULL) == MC_OK, "a put on the child's own handle");
        char *back = xmalloc(FK_LEN);
        FK_EXPECT(mc_get(mine, "fk:child", 8, back, FK_LEN) == FK_LEN && !memcmp(back, buf, FK_LEN),
                  "a get on the child's own handle");
        free(back);
        mc_close(mine);
    }
#undef FK_EXPECT
    free(buf);
    return bad > 100 ? 100 : bad;
}

/* The parent's round of puts and gets on c while the child runs: 1 if all
 * were right. */
static int parentRound(mc_client *c, int i) {
    char key[64];
    snprintf(key, sizeof(key), "fk:p%d", i % 64);
    char *val = xmalloc(FK_LEN);
    fillPattern(val, FK_LEN, seedOf(key, FK_LEN) + (uint64_t)i);
    int ok = mc_put(c, key, strlen(key), val, FK_LEN, &(mc_put_opts){.replace = 1}) == MC_OK;
    if (!ok) fprintf(stderr, "  parent: put %s: %s\n", key, lastErr(c));
    ok = ok && getSame(c, key, val, FK_LEN, MC_TRANSPORT_AUTO);
    free(val);
    return ok;
}

void testFork(void) {
    const char *group = "fork";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", "--segment-size", "16mb", NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
    mc_client *host = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_AUTO);
    char *seed = xmalloc(FK_LEN), *sval = xmalloc(FK_LEN), *hval = xmalloc(FK_LEN), *aval = xmalloc(FK_LEN);
    fillPattern(seed, FK_LEN, seedOf("fk:seed", FK_LEN));
    fillPattern(sval, FK_LEN, seedOf("fk:sess", FK_LEN));
    fillPattern(hval, FK_LEN, seedOf("fk:h", FK_LEN));
    fillPattern(aval, FK_LEN, seedOf("fk:async", FK_LEN));
    mc_view *view = NULL;
    mc_put_session *sess = NULL;
    mc_op *op = NULL;
    long long holds0 = -1;

    TEST("fork: the parent's state before the fork (a hosted segment, a view, a pending put, an async op)") {
        CHECK(r && c && host);
        if (!r || !c || !host) break;
        /* Bounded, so that a reply stolen by the child fails a call instead of hanging it. */
        mc_set_timeouts(c, 5000, 3000);
        mc_set_timeouts(host, 5000, 3000);
        CHECK_EQ(mc_mount(host, 4 * MiB, "fk-host"), MC_OK);
        CHECK_EQ(put(c, "fk:seed", seed, FK_LEN, NULL), MC_OK);
        mc_key k = fkKey("fk:seed");
        long long vres;
        CHECK_EQ(mc_batch_get_views(c, 1, &k, &view, &vres), 1);
        redisReply *info = rcmd(r, "INFO store");
        holds0 = infoField(info, "store_holds");
        if (info) freeReplyObject(info);
        CHECK_EQ(holds0, 1);
        mc_key sk = fkKey("fk:sess");
        size_t size = FK_LEN;
        int res = -1;
        CHECK_EQ(mc_put_session_start(c, 1, &sk, &size, NULL, &sess, &res), 1);
        mc_kvv kv = {"fk:async", 8, &(struct iovec){aval, FK_LEN}, 1};
        op = mc_batch_put_async(c, 1, &kv, NULL);
        CHECK(op != NULL);
        if (op) CHECK_EQ(mc_op_wait(op, 10000), 1);
    }

    int child_status = -1, parent_ok = 1, rounds = 0;
    TEST("fork: the child's calls on inherited handles fail at once, its closes touch nothing, a new handle works") {
        if (!r || !c || !host || !view || !sess || !op) {
            CHECK(0);
            break;
        }
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            /* A normal exit (exit, not _exit): whatever runs at exit runs. */
            int bad = forkChild(&s, c, host, view, sess, op);
            exit(bad);
        }
        CHECK(pid > 0);
        if (pid < 0) break;
        /* The parent keeps working on the same handle while the child runs,
         * and for as many rounds again after it ended. */
        long long deadline = tsNowMs() + 15000;
        int after = -1;
        while (after != 0) {
            parent_ok &= parentRound(c, rounds++);
            if (after > 0) after--;
            if (child_status == -1) {
                int st;
                pid_t w = waitpid(pid, &st, WNOHANG);
                if (w == pid) {
                    child_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                    after = rounds > 20 ? rounds : 20;
                } else if (tsNowMs() > deadline) {
                    fprintf(stderr, "  the child did not end within 15 s: killed\n");
                    kill(pid, SIGKILL);
                    waitpid(pid, &st, 0);
                    child_status = 99;
                    after = 5;
                }
            }
        }
        CHECK_EQ(child_status, 0);
    }

    TEST("fork: every put and get of the parent stayed byte-exact") {
        CHECK(rounds > 0);
        CHECK(parent_ok);
    }

    TEST("fork: the parent's hosted segment is still mounted and takes replicas") {
        if (!r || !host) break;
        long long id = mc_mount_id(host);
        CHECK(id > 0);
        CHECK_EQ(segInfoInt(r, "fk-host", "id"), id);
        mc_put_opts o = {0};
        o.prefer = "fk-host";
        CHECK_EQ(put(c, "fk:h", hval, FK_LEN, &o), MC_OK);
        CHECK(getSame(c, "fk:h", hval, FK_LEN, MC_TRANSPORT_AUTO));
    }

    TEST("fork: the parent's pending put is still its own to write and end") {
        if (!c || !sess) break;
        mc_src_range rg = {sval, 0, FK_LEN};
        CHECK_EQ(mc_register(c, sval, FK_LEN, MC_MEM_HOST), MC_OK);
        mc_session_ranges sr = {sess, &rg, 1};
        long long wres = -1;
        CHECK_EQ(mc_put_session_write(c, 1, &sr, &wres), 1);
        CHECK_EQ(wres, FK_LEN);
        int eres = -1;
        CHECK_EQ(mc_put_session_end(c, 1, &sess, &eres), 1);
        CHECK_EQ(eres, MC_OK);
        sess = NULL;
        CHECK(getSame(c, "fk:sess", sval, FK_LEN, MC_TRANSPORT_AUTO));
    }

    TEST("fork: the parent's view still holds its object; its async worker still runs") {
        if (!r || !view || !op) break;
        redisReply *info = rcmd(r, "INFO store");
        CHECK_EQ(infoField(info, "store_holds"), holds0);
        if (info) freeReplyObject(info);
        CHECK(mc_view_data(view) && !memcmp(mc_view_data(view), seed, FK_LEN));
        mc_view_release(view);
        view = NULL;
        mc_op_free(op);
        mc_kvv kv = {"fk:async2", 9, &(struct iovec){aval, FK_LEN}, 1};
        op = mc_batch_put_async(c, 1, &kv, NULL);
        CHECK(op != NULL);
        if (op) CHECK_EQ(mc_op_wait(op, 10000), 1);
        CHECK(getSame(c, "fk:async2", aval, FK_LEN, MC_TRANSPORT_AUTO));
    }

    if (view) mc_view_release(view);
    if (sess) mc_put_session_free(sess);
    if (op) mc_op_free(op);
    mcClose(&c);
    mcClose(&host);
    rClose(&r);
    free(seed);
    free(sval);
    free(hval);
    free(aval);
    tsGroupFinish(&s, group, failed0);
}
