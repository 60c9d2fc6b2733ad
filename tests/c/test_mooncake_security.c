/* test_mooncake_security.c -- who may do what: requirepass, forged data-plane
 * requests, ACL users and tenants.
 *
 *  - auth: wrong and missing passwords are refused; the data-plane commands
 *    need AUTH like everything else.
 *  - forged: data-plane requests sent by hand (hiredis): writes outside a
 *    pending extent, across its ends, into a complete object, with bad
 *    segment ids and offsets that overflow; reads outside a complete extent;
 *    SHM.ATTACH over TCP. All refused with -ERR and nothing changed.
 *  - acl: ACL users (mc_connect_user): tenants restricted to a key prefix
 *    put and get over TCP -- shared memory is refused them, AUTO falls back
 *    -- and cannot read or replace each other's keys; every connection the
 *    handle opens is its user's; a tenant's hosted segment takes only its
 *    own puts and serves only its own peers.
 *
 *  - reply-parser: replies no RESP server sends (numbers with a sign, a
 *    space, a leading zero or a zero byte; a boolean other than t or f)
 *    are protocol errors, not values. No server: bytes through a socketpair.
 *
 * Together because each checks that a refused request changes nothing.
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main();
 * test_mooncake.h: the shared helpers).
 */
#include "test_mooncake.h"

#include "mc_conn.h"

/* ==== 8. requirepass ========================================================================= */

/* A handle with a bad password must not work: NULL from mc_connect with a
 * reason, or MC_ERR_AUTH from its first call (and nothing stored). */
static void refused(const char *uri, const char *password, redisContext *admin) {
    char err[256] = "";
    mc_client *c = mc_connect(uri, password, err, sizeof(err));
    if (!c) {
        CHECK(err[0] != '\0');
        return;
    }
    char v[16] = "should not land";
    int rc = mc_put(c, "auth:intruder", 13, v, sizeof(v), NULL);
    CHECK_EQ(rc, MC_ERR_AUTH);
    char buf[16];
    CHECK_EQ(mc_get(c, "auth:ok", 7, buf, sizeof(buf)), MC_ERR_AUTH);
    mc_close(c);
    redisReply *e = rcmd(admin, "EXISTS auth:intruder");
    CHECK_EQ(replyInt(e), 0);
    freeReplyObject(e);
}

void testAuth(void) {
    const char *group = "auth";
    const char *pw = "s3cret-pw";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--requirepass", pw, NULL), &s, group)) return;
    redisContext *admin = rTcp(&s);
    if (admin) freeReplyObject(rcmd(admin, "AUTH %s", pw));

    TEST("auth: a wrong password is refused over tcp and over the unix socket") {
        refused(s.tcp_uri, "wrong", admin);
        refused(s.unix_uri, "wrong", admin);
    }
    TEST("auth: no password is refused") {
        refused(s.tcp_uri, NULL, admin);
        refused(s.unix_uri, NULL, admin);
    }
    TEST("auth: the right password works over tcp and over shm") {
        char v[5000];
        fillPattern(v, sizeof(v), seedOf("auth:ok", sizeof(v)));
        mc_client *ctcp = mcOpen(s.tcp_uri, pw, MC_TRANSPORT_TCP);
        mc_client *cshm = mcOpen(s.unix_uri, pw, MC_TRANSPORT_SHM);
        CHECK(ctcp != NULL && cshm != NULL);
        if (ctcp && cshm) {
            CHECK_EQ(put(ctcp, "auth:ok", v, sizeof(v), NULL), MC_OK);
            CHECK(getSame(cshm, "auth:ok", v, sizeof(v), MC_TRANSPORT_SHM));
            CHECK_EQ(put(cshm, "auth:ok2", v, sizeof(v), NULL), MC_OK);
            CHECK(getSame(ctcp, "auth:ok2", v, sizeof(v), MC_TRANSPORT_TCP));
        }
        mcClose(&ctcp);
        mcClose(&cshm);
    }
    TEST("auth: without AUTH, SHM.ATTACH, SEG.READ and SEG.WRITE get -NOAUTH") {
        redisContext *u = rUnix(&s), *t = rTcp(&s);
        CHECK(u != NULL && t != NULL);
        CHECK(expectError("NOAUTH", rcmd(u, "SHM.ATTACH 1"), "SHM.ATTACH (unix, no AUTH)"));
        CHECK(expectError("NOAUTH", rcmd(t, "SEG.READ 1 0 16"), "SEG.READ (tcp, no AUTH)"));
        CHECK(expectError("NOAUTH", rcmd(u, "SEG.READ 1 0 16"), "SEG.READ (unix, no AUTH)"));
        CHECK(expectError("NOAUTH", rcmd(t, "SEG.WRITE 1 0 %b", "0123456789abcdef", (size_t)16),
                          "SEG.WRITE (tcp, no AUTH)"));
        rClose(&u);
        rClose(&t);
    }
    TEST("auth: after AUTH, SHM.ATTACH on the unix socket answers [1, size]") {
        redisContext *u = rUnix(&s);
        CHECK(u != NULL);
        if (u) {
            CHECK(expectOk(rcmd(u, "AUTH %s", pw), "AUTH"));
            redisReply *a = rcmd(u, "SHM.ATTACH 1");
            int ok = a && a->type == REDIS_REPLY_ARRAY && a->elements == 2 && replyInt(a->element[0]) == 1 &&
                     replyInt(a->element[1]) == (long long)(64 * MiB);
            if (!ok) showReply("SHM.ATTACH 1", a);
            CHECK(ok);
            freeReplyObject(a);
        }
        rClose(&u);
    }
    rClose(&admin);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 9. forged data-plane requests ============================================================ */

#define FG_LEN 4000 /* not a multiple of any allocation unit: extents end mid-unit */

/* SEG.WRITE seg off payload; expect "OK" or an error prefix. */
static int segWrite(redisContext *r, const char *seg, const char *off, const void *p, size_t n, const char *expect,
                    const char *what) {
    redisReply *rep = rcmd(r, "SEG.WRITE %s %s %b", seg, off, p, n);
    if (!strcmp(expect, "OK")) return expectOk(rep, what);
    return expectError(expect, rep, what);
}

static int segReadErr(redisContext *r, const char *seg, const char *off, const char *len, const char *what) {
    return expectError("ERR", rcmd(r, "SEG.READ %s %s %s", seg, off, len), what);
}

static void lld(char *buf, size_t cap, long long v) { snprintf(buf, cap, "%lld", v); }

/* An offset in segment 1 at least 64 KiB away from the given extents. */
static long long farOffset(long long segsize, const long long *offs, int n) {
    long long cand[] = {segsize - 2 * FG_LEN, segsize / 2, segsize / 4, 0};
    for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]); i++) {
        int clear = 1;
        for (int j = 0; j < n; j++)
            if (cand[i] + FG_LEN + 65536 > offs[j] && cand[i] < offs[j] + FG_LEN + 65536) clear = 0;
        if (clear) return cand[i];
    }
    return segsize - 2 * FG_LEN;
}

void testForged(void) {
    const char *group = "forged data plane";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "16mb", NULL), &s, group)) return;
    const long long segsize = 16 * (long long)MiB;
    redisContext *r = rTcp(&s);
    char c_pat[FG_LEN], p_pat[FG_LEN], junk[FG_LEN + 16];
    fillPattern(c_pat, FG_LEN, seedOf("fg:c", FG_LEN));
    fillPattern(p_pat, FG_LEN, seedOf("fg:p", FG_LEN));
    fillPattern(junk, sizeof(junk), seedOf("junk", 1));
    long long cseg = -1, coff = -1, pseg = -1, poff = -1, qseg = -1, qoff = -1;
    char o[64];

    TEST("forged: the honest path works: PUT.START, SEG.WRITE (whole and part), PUT.END, SEG.READ, GET") {
        CHECK(r != NULL);
        CHECK(putStartReplica(rcmd(r, "PUT.START fg:c %d", FG_LEN), &cseg, &coff));
        CHECK_EQ(cseg, 1);
        lld(o, sizeof(o), coff);
        CHECK(segWrite(r, "1", o, c_pat, FG_LEN, "OK", "SEG.WRITE into the pending extent"));
        CHECK(expectOk(rcmd(r, "PUT.END fg:c"), "PUT.END fg:c"));
        CHECK(redisGetSame(r, "fg:c", c_pat, FG_LEN));
        redisReply *rd = rcmd(r, "SEG.READ 1 %lld %d", coff, FG_LEN);
        CHECK(rd && rd->type == REDIS_REPLY_STRING && rd->len == FG_LEN && !memcmp(rd->str, c_pat, FG_LEN));
        if (!(rd && rd->type == REDIS_REPLY_STRING)) showReply("SEG.READ of the whole extent", rd);
        freeReplyObject(rd);
        rd = rcmd(r, "SEG.READ 1 %lld 20", coff + 100);
        CHECK(rd && rd->type == REDIS_REPLY_STRING && rd->len == 20 && !memcmp(rd->str, c_pat + 100, 20));
        freeReplyObject(rd);

        CHECK(putStartReplica(rcmd(r, "PUT.START fg:p %d", FG_LEN), &pseg, &poff));
        CHECK_EQ(pseg, 1);
        lld(o, sizeof(o), poff);
        CHECK(segWrite(r, "1", o, p_pat, FG_LEN, "OK", "SEG.WRITE of a whole pending extent"));
        /* A part of the extent may be written on its own, too. */
        fillPattern(p_pat + 1000, 24, seedOf("fg:p:part", 24));
        lld(o, sizeof(o), poff + 1000);
        CHECK(segWrite(r, "1", o, p_pat + 1000, 24, "OK", "SEG.WRITE inside a pending extent"));
    }
    TEST("forged: SEG.WRITE outside any extent, across either end, into a complete object: -ERR") {
        long long exts[] = {coff, poff};
        long long far = farOffset(segsize, exts, 2);
        lld(o, sizeof(o), far);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE outside any extent"));
        lld(o, sizeof(o), poff + FG_LEN - 8);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE across the end of a pending extent"));
        lld(o, sizeof(o), poff + FG_LEN);
        CHECK(segWrite(r, "1", o, junk, 1, "ERR", "SEG.WRITE just past the end of a pending extent"));
        if (poff >= 8) {
            lld(o, sizeof(o), poff - 8);
            CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE across the start of a pending extent"));
        }
        lld(o, sizeof(o), poff);
        CHECK(segWrite(r, "1", o, junk, FG_LEN + 1, "ERR", "SEG.WRITE one byte longer than the extent"));
        lld(o, sizeof(o), coff);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE into a complete object"));
        lld(o, sizeof(o), coff + FG_LEN - 16);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE into the tail of a complete object"));
        lld(o, sizeof(o), segsize - 8);
        CHECK(segWrite(r, "1", o, junk, 16, "ERR", "SEG.WRITE across the end of the segment"));
    }
    TEST("forged: SEG.WRITE with a bad segment id or offset (negative, huge, wrapping): -ERR") {
        lld(o, sizeof(o), poff);
        CHECK(segWrite(r, "999999", o, junk, 16, "ERR", "SEG.WRITE to segment 999999"));
        CHECK(segWrite(r, "0", o, junk, 16, "ERR", "SEG.WRITE to segment 0"));
        CHECK(segWrite(r, "-1", o, junk, 16, "ERR", "SEG.WRITE to segment -1"));
        CHECK(segWrite(r, "self", o, junk, 16, "ERR", "SEG.WRITE to segment 'self'"));
        CHECK(segWrite(r, "1", "-1", junk, 16, "ERR", "SEG.WRITE at offset -1"));
        char neg[64];
        lld(neg, sizeof(neg), -(poff + 1));
        CHECK(segWrite(r, "1", neg, junk, 16, "ERR", "SEG.WRITE at a negative offset"));
        /* 2^64 - 8: offset + 16 wraps around to 8. */
        CHECK(segWrite(r, "1", "18446744073709551608", junk, 16, "ERR", "SEG.WRITE at 2^64-8 (wraps)"));
        CHECK(segWrite(r, "1", "9223372036854775807", junk, 16, "ERR", "SEG.WRITE at 2^63-1"));
        CHECK(segWrite(r, "1", "9223372036854775800", junk, 16, "ERR", "SEG.WRITE at 2^63-8 (wraps signed)"));
        CHECK(segWrite(r, "1", "18446744073709551616", junk, 16, "ERR", "SEG.WRITE at 2^64"));
        CHECK(segWrite(r, "1", "12abc", junk, 16, "ERR", "SEG.WRITE at offset '12abc'"));
        CHECK(expectError("ERR", rcmd(r, "SEG.WRITE 1 %lld", poff), "SEG.WRITE without a payload"));
    }
    TEST("forged: after all that, both values are exactly what the honest writes put there") {
        CHECK(expectOk(rcmd(r, "PUT.END fg:p"), "PUT.END fg:p"));
        CHECK(redisGetSame(r, "fg:p", p_pat, FG_LEN));
        CHECK(redisGetSame(r, "fg:c", c_pat, FG_LEN));
        mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(getSame(c, "fg:p", p_pat, FG_LEN, MC_TRANSPORT_AUTO));
        CHECK(getSame(c, "fg:c", c_pat, FG_LEN, MC_TRANSPORT_AUTO));
        mcClose(&c);
    }
    TEST("forged: SEG.READ of a pending extent, across an extent's end, elsewhere, bad ids and offsets: -ERR") {
        CHECK(putStartReplica(rcmd(r, "PUT.START fg:q %d", FG_LEN), &qseg, &qoff));
        lld(o, sizeof(o), qoff);
        CHECK(segReadErr(r, "1", o, "16", "SEG.READ of a pending extent"));
        lld(o, sizeof(o), coff + FG_LEN - 8);
        CHECK(segReadErr(r, "1", o, "16", "SEG.READ across the end of a complete extent"));
        lld(o, sizeof(o), coff);
        CHECK(segReadErr(r, "1", o, "4001", "SEG.READ one byte longer than the extent"));
        CHECK(segReadErr(r, "1", o, "18446744073709551615", "SEG.READ of length 2^64-1"));
        CHECK(segReadErr(r, "1", o, "-1", "SEG.READ of length -1"));
        if (coff >= 8) {
            lld(o, sizeof(o), coff - 8);
            CHECK(segReadErr(r, "1", o, "16", "SEG.READ across the start of a complete extent"));
        }
        long long exts[] = {coff, poff, qoff};
        lld(o, sizeof(o), farOffset(segsize, exts, 3));
        CHECK(segReadErr(r, "1", o, "16", "SEG.READ outside any extent"));
        lld(o, sizeof(o), coff);
        CHECK(segReadErr(r, "999999", o, "16", "SEG.READ of segment 999999"));
        CHECK(segReadErr(r, "1", "-1", "16", "SEG.READ at offset -1"));
        CHECK(segReadErr(r, "1", "18446744073709551608", "16", "SEG.READ at 2^64-8 (wraps)"));
        CHECK(segReadErr(r, "1", "9223372036854775800", "16", "SEG.READ at 2^63-8"));
        /* The pending object is still pending and empty-handed. */
        CHECK(expectError("NOTREADY", rcmd(r, "GET.REPLICAS fg:q"), "GET.REPLICAS fg:q"));
        CHECK(expectOk(rcmd(r, "PUT.REVOKE fg:q"), "PUT.REVOKE fg:q"));
    }
    TEST("forged: SHM.ATTACH over TCP is -ERR; over the unix socket it answers [1, size]") {
        CHECK(expectError("ERR", rcmd(r, "SHM.ATTACH 1"), "SHM.ATTACH over tcp"));
        redisContext *u = rUnix(&s);
        CHECK(u != NULL);
        if (u) {
            redisReply *a = rcmd(u, "SHM.ATTACH 1");
            int ok = a && a->type == REDIS_REPLY_ARRAY && a->elements == 2 && replyInt(a->element[0]) == 1 &&
                     replyInt(a->element[1]) == segsize;
            if (!ok) showReply("SHM.ATTACH 1 over unix", a);
            CHECK(ok);
            freeReplyObject(a);
            CHECK(expectError("ERR", rcmd(u, "SHM.ATTACH 999999"), "SHM.ATTACH of segment 999999"));
        }
        rClose(&u);
        redisReply *p = rcmd(r, "PING");
        CHECK(p && p->type == REDIS_REPLY_STATUS);
        freeReplyObject(p);
    }
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 12. ACL users and tenants ================================================================== */

static mc_client *mcOpenUser(const char *uri, const char *user, const char *password, int transport) {
    char err[256] = "";
    mc_client *c = mc_connect_user(uri, user, password, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "  mc_connect_user(%s, %s): %s\n", uri, user ? user : "(null)", err[0] ? err : "(no reason)");
        return NULL;
    }
    if (transport != MC_TRANSPORT_AUTO) mc_set_transport(c, transport);
    return c;
}

/* Connections of user in CLIENT LIST. */
static int clientsOf(redisContext *r, const char *user) {
    redisReply *l = rcmd(r, "CLIENT LIST");
    int n = 0;
    char needle[64];
    snprintf(needle, sizeof(needle), " user=%s ", user);
    if (l && l->type == REDIS_REPLY_STRING) /* RESP2: CLIENT LIST is a bulk string */
        for (const char *p = l->str; (p = strstr(p, needle)) != NULL; p++) n++;
    freeReplyObject(l);
    return n;
}

/* Every connection in CLIENT LIST (one line each). */
static int clientsAll(redisContext *r) {
    redisReply *l = rcmd(r, "CLIENT LIST");
    int n = 0;
    if (l && l->type == REDIS_REPLY_STRING)
        for (const char *p = l->str; (p = strstr(p, "id=")) != NULL; p++)
            if (p == l->str || p[-1] == '\n') n++;
    freeReplyObject(l);
    return n;
}

void testAcl(void) {
    const char *group = "acl";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    CHECK(expectOk(rcmd(r, "ACL SETUSER alice on >pa ~acl:a:* +@all"), "ACL SETUSER alice"));
    CHECK(expectOk(rcmd(r, "ACL SETUSER bob on >pb ~acl:b:* +@all"), "ACL SETUSER bob"));
    mc_client *atcp = NULL, *aunix = NULL, *btcp = NULL, *ahost = NULL;
    const size_t n = 1 * MiB + 5;
    char *v = xmalloc(n), *w = xmalloc(n);

    TEST("acl: mc_connect_user with a wrong password, an unknown user or no password is refused") {
        char err[256] = "";
        mc_client *c = mc_connect_user(s.tcp_uri, "alice", "wrong", err, sizeof(err));
        CHECK(c == NULL && strstr(err, "WRONGPASS") != NULL);
        c = mc_connect_user(s.tcp_uri, "nobody", "pa", err, sizeof(err));
        CHECK(c == NULL);
        c = mc_connect_user(s.tcp_uri, "alice", NULL, err, sizeof(err));
        CHECK(c == NULL);
        if (c) mc_close(c);
    }
    TEST("acl: a tenant puts and gets over the TCP data plane; the data connections are its user's") {
        atcp = mcOpenUser(s.tcp_uri, "alice", "pa", MC_TRANSPORT_TCP);
        CHECK(atcp != NULL);
        fillPattern(v, n, seedOf("acl:a:1", n));
        if (atcp) {
            CHECK_EQ(mc_set_streams(atcp, 4), MC_OK); /* the stream workers open connections of their own */
            CHECK_EQ(put(atcp, "acl:a:1", v, n, NULL), MC_OK);
            CHECK(getSame(atcp, "acl:a:1", v, n, MC_TRANSPORT_TCP));
        }
        /* Every connection the handle opened is alice's: the metadata one
         * (which also carries the first stream) and at least one worker's,
         * and no other connection but r (default) is there. How many
         * workers opened one is the scheduler's business: whichever worker
         * is awake claims the next slice (mc_tcp.c), so one worker may run
         * several slices of the put and the get, and ">= 3" failed on a busy
         * machine with a put and a get that had both succeeded. */
        int na = clientsOf(r, "alice"), nd = clientsOf(r, "default"), all;
        /* The refused connections of the test before are closed; the
         * server may not have read their EOF yet on a busy machine. A
         * connection of the handle's that is not alice's would stay. */
        for (long long deadline = tsNowMs() + 5000; nd > 1 && tsNowMs() < deadline; nd = clientsOf(r, "default"))
            usleep(10000);
        all = clientsAll(r);
        if (na < 2 || nd != 1 || all != na + nd)
            fprintf(stderr, "  CLIENT LIST: %d alice, %d default, %d in all\n", na, nd, all);
        CHECK(na >= 2);
        CHECK_EQ(nd, 1);
        CHECK_EQ(all, na + nd);
        CHECK_EQ(clientsOf(r, "bob"), 0);
    }
    TEST("acl: over the unix socket AUTO falls back to TCP: a tenant is refused SHM.ATTACH") {
        aunix = mcOpenUser(s.unix_uri, "alice", "pa", MC_TRANSPORT_AUTO);
        CHECK(aunix != NULL);
        if (aunix) {
            CHECK(getSame(aunix, "acl:a:1", v, n, MC_TRANSPORT_TCP));
            fillPattern(w, n, seedOf("acl:a:2", n));
            CHECK_EQ(put(aunix, "acl:a:2", w, n, NULL), MC_OK);
            CHECK_EQ(mc_last_transport(aunix), MC_TRANSPORT_TCP);
            CHECK(getSame(atcp, "acl:a:2", w, n, MC_TRANSPORT_TCP));
            mc_set_transport(aunix, MC_TRANSPORT_SHM);
            char small[8];
            CHECK(mc_get(aunix, "acl:a:1", 7, small, sizeof(small)) < 0);
        }
    }
    TEST("acl: a tenant cannot read, replace or remove another's key (MC_ERR_AUTH), which stays intact") {
        btcp = mcOpenUser(s.tcp_uri, "bob", "pb", MC_TRANSPORT_TCP);
        CHECK(btcp != NULL);
        if (btcp) {
            fillPattern(w, n, seedOf("acl:b:1", n));
            CHECK_EQ(put(btcp, "acl:b:1", w, n, NULL), MC_OK);
            CHECK_EQ(mc_get(atcp, "acl:b:1", 7, v, n), MC_ERR_AUTH);
            CHECK(strstr(lastErr(atcp), "NOPERM") != NULL);
            mc_put_opts o = {0};
            o.replace = 1;
            CHECK_EQ(mc_put(atcp, "acl:b:1", 7, v, n, &o), MC_ERR_AUTH);
            CHECK(mc_remove(atcp, "acl:b:1", 7) < 0);
            CHECK(getSame(btcp, "acl:b:1", w, n, MC_TRANSPORT_TCP));
        }
    }
    TEST("acl: a tenant's hosted segment takes only its own puts and admits only its own peers") {
        ahost = mcOpenUser(s.unix_uri, "alice", "pa", MC_TRANSPORT_AUTO);
        CHECK(ahost != NULL);
        int rc = ahost ? mc_mount(ahost, 16 * MiB, "acl-a-host") : MC_ERR_IO;
        if (rc != MC_OK) fprintf(stderr, "  mc_mount: %d %s (%s)\n", rc, mc_strerror(rc), lastErr(ahost));
        CHECK_EQ(rc, MC_OK);
        long long hid = ahost ? mc_mount_id(ahost) : -1;
        mc_put_opts o = {0};
        o.prefer = "acl-a-host";
        fillPattern(v, n, seedOf("acl:a:hosted", n));
        if (atcp && rc == MC_OK) {
            /* alice's put lands in her segment; another alice handle reads it
             * from the host's listener, which admits alice. */
            CHECK_EQ(put(atcp, "acl:a:hosted", v, n, &o), MC_OK);
            long long segs[4], offs[4];
            CHECK_EQ(replicaList(r, "acl:a:hosted", segs, offs, 4), 1);
            CHECK_EQ(segs[0], hid);
            CHECK(getSame(atcp, "acl:a:hosted", v, n, MC_TRANSPORT_TCP));
        }
        if (btcp && rc == MC_OK) {
            /* bob cannot name it, and his puts never land there. */
            CHECK(mc_put(btcp, "acl:b:pref", 10, v, n, &o) < 0);
            CHECK(strstr(lastErr(btcp), "no such segment") != NULL);
            o.prefer = NULL;
            o.replicas = 8;
            CHECK_EQ(put(btcp, "acl:b:spread", v, n, &o), MC_OK);
            long long segs[8], offs[8];
            int nrep = replicaList(r, "acl:b:spread", segs, offs, 8);
            CHECK(nrep >= 1);
            for (int i = 0; i < nrep; i++) CHECK(segs[i] != hid);
        }
        /* A raw peer with bob's credentials is refused by alice's listener. */
        char ep[300] = "";
        segEndpoint(r, "acl-a-host", "tcp://", ep, sizeof(ep));
        CHECK(ep[0] != '\0');
        char *colon = strrchr(ep, ':');
        if (colon) {
            *colon = '\0';
            struct timeval tv = {5, 0};
            redisContext *peer = rConfigure(redisConnectWithTimeout(ep + 6, atoi(colon + 1), tv), "alice's listener");
            CHECK(peer != NULL);
            CHECK(expectError("WRONGPASS", rcmd(peer, "AUTH bob pb"), "AUTH bob at alice's listener"));
            CHECK(expectError("WRONGPASS", rcmd(peer, "AUTH pa"), "AUTH (default) at alice's listener"));
            CHECK(expectError("NOAUTH", rcmd(peer, "SEG.READ %lld 0 16", hid), "SEG.READ unauthenticated"));
            CHECK(expectOk(rcmd(peer, "AUTH alice pa"), "AUTH alice at alice's listener"));
            rClose(&peer);
        }
    }
    free(v);
    free(w);
    mcClose(&ahost);
    mcClose(&btcp);
    mcClose(&aunix);
    mcClose(&atcp);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 11. replies that are no RESP ============================================================ */

/* libmooncake reads replies from the server and from segment hosts, which
 * are other client processes (mc_conn.c). Bytes written into a socketpair
 * and read by an mcConn as a reply: what it made of them (NULL when the
 * connection was declared broken, its reason in err). */
static mcReply *readReply(const char *bytes, size_t len, char *err, size_t errlen) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return NULL;
    if (write(sv[1], bytes, len) != (ssize_t)len) {}
    shutdown(sv[1], SHUT_WR);
    mcConn *c = calloc(1, sizeof(*c));
    c->fd = sv[0];
    c->is_unix = 1;
    c->recv_fd = -1;
    mcReply *r = mcConnRead(c);
    snprintf(err, errlen, "%s", c->err);
    mcConnClose(c);
    close(sv[1]);
    return r;
}

#define READ_REPLY(lit, err) readReply(lit, sizeof(lit) - 1, err, sizeof(err))

/* Lengths, counts and integers are read as RESP writes them and nothing
 * else: strtoll took " 5", "+5", "05", "-0" and stopped at a zero byte;
 * a boolean other than t or f was false, "_x" nil and a verbatim string
 * without its format a bulk. A differential fuzz run against hiredis's
 * reader found each. */
void testReplyParser(void) {
    watchdog();
    char err[256];
    TEST("replies: integers, lengths and RESP3 types in their one form are read") {
        mcReply *r = READ_REPLY(":-9223372036854775808\r\n", err);
        CHECK(r && r->type == MCR_INT && r->integer == INT64_MIN);
        mcReplyFree(r);
        r = READ_REPLY(":9223372036854775807\r\n", err);
        CHECK(r && r->type == MCR_INT && r->integer == INT64_MAX);
        mcReplyFree(r);
        r = READ_REPLY(":0\r\n", err);
        CHECK(r && r->type == MCR_INT && r->integer == 0);
        mcReplyFree(r);
        r = READ_REPLY("$0\r\n\r\n", err);
        CHECK(r && r->type == MCR_BULK && r->len == 0);
        mcReplyFree(r);
        r = READ_REPLY("*-1\r\n", err);
        CHECK(r && r->type == MCR_NIL);
        mcReplyFree(r);
        r = READ_REPLY("#t\r\n", err);
        CHECK(r && r->type == MCR_INT && r->integer == 1);
        mcReplyFree(r);
        r = READ_REPLY("_\r\n", err);
        CHECK(r && r->type == MCR_NIL);
        mcReplyFree(r);
        r = READ_REPLY("=8\r\ntxt:abcd\r\n", err);
        CHECK(r && r->type == MCR_BULK && r->len == 8 && !memcmp(r->str, "txt:abcd", 8));
        mcReplyFree(r);
    }
    TEST("replies: a sign, a space, a leading zero or a zero byte in a number is a protocol error") {
        static const struct {
            const char *bytes;
            size_t len;
        } bad[] = {
#define B(lit) {lit, sizeof(lit) - 1}
            B(": 5\r\n"), B(":+5\r\n"), B(":05\r\n"), B(":-0\r\n"), B(":5\0\r\n"), B(":\r\n"), B(":-\r\n"),
            B(":9223372036854775808\r\n"), B(":-9223372036854775809\r\n"), B("$ 3\r\nabc\r\n"),
            B("$+3\r\nabc\r\n"), B("$03\r\nabc\r\n"), B("$3\0\r\nabc\r\n"), B("*-0\r\n"), B("* 1\r\n:1\r\n"),
            B("#x\r\n"), B("#\r\n"), B("#tt\r\n"), B("_x\r\n"), B("=3\r\nabc\r\n"), B("=4\r\nabcd\r\n"),
#undef B
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            mcReply *r = readReply(bad[i].bytes, bad[i].len, err, sizeof(err));
            if (r != NULL || !strstr(err, "protocol error")) {
                printf("    reply %zu (%.*s) was taken: %s\n", i, (int)bad[i].len - 2, bad[i].bytes, err);
                CHECK(0);
            }
            mcReplyFree(r);
        }
    }
}
