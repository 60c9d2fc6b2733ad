/* test_mooncake_batch.c -- many keys or many pieces in one call: batches,
 * exists, scatter-gather, ranged reads and replica descriptions.
 *
 *  - batch: 128 values at once, a missing key, a too-small buffer and an
 *    existing key inside a batch each fail alone; batches mixing tcp and shm.
 *    A put session given twice to one end or revoke: ended and freed once.
 *  - exists: mc_batch_exists (BATCH.EXISTS) per key, PREFIX and LEASE, its
 *    invalid arguments; mc_remove_all.
 *  - scatter-gather: mc_put_fromv, mc_get_intov, mc_batch_putv/getv over
 *    shm, tcp and tcp with 4 streams, odd cuts, buffers too small, invalid
 *    vectors; guard bytes between the pieces.
 *  - ranges: ranged reads (mc_batch_get_ranges) over shm and tcp: several
 *    ranges per key, one key in two items (both leases released), ranges at
 *    the object's end, len 0, a range outside the object (overflowing ones
 *    too) or an unregistered dst failing alone, a missing and a pending key
 *    failing all their ranges, a 9 MiB object in 41 pieces (small ones
 *    sharing SEG.READVs), items refused whole, an object in a segment a
 *    third handle hosts; every range byte-exact with guard bytes after it.
 *    (Also in basic's fallback and lease groups.) Replica descriptions
 *    (mc_batch_replicas): pool objects, objects in a client-hosted segment,
 *    missing and pending keys, compared with GET.REPLICAS and SEGMENT.INFO;
 *    no lease left behind.
 *
 * Together because each result is per item: one item failing must fail
 * alone, in its place.
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main();
 * test_mooncake.h: the shared helpers).
 */
#include "test_mooncake.h"

/* ==== 11. batches ================================================================================= */

#define BT_N 128
#define BT_LEN (4 * KiB)

static void btKey(char *key, size_t cap, int i) { snprintf(key, cap, "bt:%03d", i); }

/* Batch get of all BT_N keys with a missing one inserted at BT_N/2. */
static void batchGetWithMissing(mc_client *c, char keys[][16], char *vals) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    mc_kv items[BT_N + 1];
    long long results[BT_N + 1];
    char *bufs = xmalloc((BT_N + 1) * BT_LEN);
    memset(bufs, 0, (BT_N + 1) * BT_LEN);
    for (int i = 0, k = 0; i <= BT_N; i++) {
        results[i] = 12345;
        items[i].buf = bufs + (size_t)i * BT_LEN;
        items[i].len = BT_LEN;
        if (i == BT_N / 2) {
            items[i].key = "bt:missing";
            items[i].keylen = 10;
        } else {
            items[i].key = keys[k];
            items[i].keylen = strlen(keys[k]);
            k++;
        }
    }
    int ok = mc_batch_get(c, BT_N + 1, items, results);
    CHECK_EQ(ok, BT_N);
    CHECK_EQ(results[BT_N / 2], MC_ERR_NOT_FOUND);
    int bad = 0;
    for (int i = 0, k = 0; i <= BT_N; i++) {
        if (i == BT_N / 2) continue;
        if (!sameBytes(keys[k], items[i].buf, results[i], vals + (size_t)k * BT_LEN, BT_LEN) && bad++ > 3) break;
        k++;
    }
    CHECK_EQ(bad, 0);
    free(bufs);
}

/* calls=N of INFO commandstats for cmd (lower case), -1 if absent. */
static long long commandCalls(const tsServer *s, const char *cmd) {
    redisContext *r = rTcp(s);
    redisReply *rep = r ? rcmd(r, "INFO commandstats") : NULL;
    long long n = -1;
    char needle[64];
    snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", cmd);
    if (rep && rep->type == REDIS_REPLY_STRING) {
        const char *p = strstr(rep->str, needle);
        if (p) n = atoll(p + strlen(needle));
    }
    freeReplyObject(rep);
    rClose(&r);
    return n;
}

/* 96 values, every third 100 KiB (its own SEG.WRITE, in place) and the
 * rest 4 KiB + i (vector commands), put over tcp (into segment prefer if
 * given), read back over tcp and over shm byte for byte. */
static void batchMixedTcp(const tsServer *s, mc_client *ctcp, mc_client *cshm, const char *prefer, const char *tag) {
    enum { N = 96 };
    if (!ctcp || !cshm) {
        CHECK(ctcp != NULL && cshm != NULL);
        return;
    }
    static char keys[N][32];
    size_t lens[N], total = 0, offs[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%s:%d", tag, i);
        lens[i] = i % 3 == 0 ? 100 * KiB : 4 * KiB + (size_t)i;
        offs[i] = total;
        total += lens[i];
    }
    char *want = xmalloc(total), *got = xmalloc(total), *got2 = xmalloc(total);
    mc_kv items[N];
    int results[N];
    long long gres[N];
    for (int i = 0; i < N; i++) {
        fillPattern(want + offs[i], lens[i], seedOf(keys[i], lens[i]));
        items[i] = (mc_kv){keys[i], strlen(keys[i]), want + offs[i], lens[i]};
    }
    long long wv0 = commandCalls(s, "seg.writev"), rv0 = commandCalls(s, "seg.readv");
    mc_put_opts o = {0};
    o.prefer = prefer;
    CHECK_EQ(mc_batch_put(ctcp, N, items, prefer ? &o : NULL, results), N);
    for (int i = 0; i < N; i++) items[i].buf = got + offs[i];
    memset(got, 0, total);
    CHECK_EQ(mc_batch_get(ctcp, N, items, gres), N);
    int bad = 0;
    for (int i = 0; i < N; i++)
        if (!sameBytes(keys[i], got + offs[i], gres[i], want + offs[i], lens[i])) bad++;
    CHECK_EQ(bad, 0);
    for (int i = 0; i < N; i++) items[i].buf = got2 + offs[i];
    CHECK_EQ(mc_batch_get(cshm, N, items, gres), N);
    bad = 0;
    for (int i = 0; i < N; i++)
        if (!sameBytes(keys[i], got2 + offs[i], gres[i], want + offs[i], lens[i])) bad++;
    CHECK_EQ(bad, 0);
    if (prefer == NULL) {
        /* The server's own pool: the vectors went through it. */
        CHECK(commandCalls(s, "seg.writev") > (wv0 < 0 ? 0 : wv0));
        CHECK(commandCalls(s, "seg.readv") > (rv0 < 0 ? 0 : rv0));
    } else {
        /* The hosted segment's own listener served them, not the server. */
        CHECK_EQ(commandCalls(s, "seg.writev"), wv0);
        CHECK_EQ(commandCalls(s, "seg.readv"), rv0);
        redisContext *r = rTcp(s);
        long long segs[4], offs2[4];
        CHECK_EQ(replicaList(r, keys[1], segs, offs2, 4), 1);
        CHECK_EQ(segs[0], segInfoInt(r, prefer, "id"));
        rClose(&r);
    }
    free(want);
    free(got);
    free(got2);
}

void testBatch(void) {
    const char *group = "batch";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    static char keys[BT_N][16];
    char *vals = xmalloc((size_t)BT_N * BT_LEN);
    for (int i = 0; i < BT_N; i++) {
        btKey(keys[i], sizeof(keys[i]), i);
        fillPattern(vals + (size_t)i * BT_LEN, BT_LEN, seedOf(keys[i], BT_LEN));
    }
    mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);

    TEST("batch: mc_batch_put of 128 values of 4 KiB, every result OK") {
        CHECK(c != NULL);
        if (c) {
            mc_kv items[BT_N];
            int results[BT_N];
            for (int i = 0; i < BT_N; i++) {
                items[i] = (mc_kv){keys[i], strlen(keys[i]), vals + (size_t)i * BT_LEN, BT_LEN};
                results[i] = 12345;
            }
            int ok = mc_batch_put(c, BT_N, items, NULL, results);
            CHECK_EQ(ok, BT_N);
            int bad = 0;
            for (int i = 0; i < BT_N; i++)
                if (results[i] != MC_OK && bad++ < 4)
                    fprintf(stderr, "  item %d: %d %s\n", i, results[i], mc_strerror(results[i]));
            CHECK_EQ(bad, 0);
        }
    }
    TEST("batch: mc_batch_get over tcp of the 128 keys and a missing one (NOT_FOUND alone)") {
        batchGetWithMissing(ctcp, keys, vals);
    }
    TEST("batch: mc_batch_get over shm of the 128 keys and a missing one (NOT_FOUND alone)") {
        batchGetWithMissing(cshm, keys, vals);
    }
    TEST("batch: a too-small buffer in a batch get is TOO_SMALL for that item alone") {
        CHECK(c != NULL);
        if (c) {
            char b0[BT_LEN], b1[BT_LEN], b2[BT_LEN];
            mc_kv items[3] = {{keys[0], strlen(keys[0]), b0, BT_LEN},
                              {keys[1], strlen(keys[1]), b1, BT_LEN - 1},
                              {keys[2], strlen(keys[2]), b2, BT_LEN}};
            long long results[3] = {1, 1, 1};
            CHECK_EQ(mc_batch_get(c, 3, items, results), 2);
            CHECK_EQ(results[1], MC_ERR_TOO_SMALL);
            CHECK(sameBytes(keys[0], b0, results[0], vals, BT_LEN));
            CHECK(sameBytes(keys[2], b2, results[2], vals + 2 * BT_LEN, BT_LEN));
        }
    }
    TEST("batch: an existing key in a batch put is EXISTS for that item alone, and keeps its value") {
        CHECK(c != NULL);
        if (c) {
            char n0[BT_LEN], n1[BT_LEN], n2[BT_LEN];
            fillPattern(n0, BT_LEN, seedOf("bt:new0", BT_LEN));
            fillPattern(n1, BT_LEN, seedOf("bt:new1", BT_LEN));
            fillPattern(n2, BT_LEN, seedOf("bt:new2", BT_LEN));
            mc_kv items[3] = {{"bt:new0", 7, n0, BT_LEN}, {keys[5], strlen(keys[5]), n1, BT_LEN}, {"bt:new2", 7, n2, BT_LEN}};
            int results[3] = {1, 1, 1};
            CHECK_EQ(mc_batch_put(c, 3, items, NULL, results), 2);
            CHECK_EQ(results[0], MC_OK);
            CHECK_EQ(results[1], MC_ERR_EXISTS);
            CHECK_EQ(results[2], MC_OK);
            CHECK(getSame(c, keys[5], vals + 5 * BT_LEN, BT_LEN, MC_TRANSPORT_AUTO));
            CHECK(getSame(c, "bt:new0", n0, BT_LEN, MC_TRANSPORT_AUTO));
            CHECK(getSame(c, "bt:new2", n2, BT_LEN, MC_TRANSPORT_AUTO));
        }
    }
    TEST("batch: over tcp, 96 values of 4..100 KiB: small ones share SEG.WRITEV/SEG.READV, byte for byte") {
        batchMixedTcp(&s, ctcp, cshm, NULL, "bm");
    }
    TEST("batch: over tcp into a segment hosted by a client: the host serves the vector commands") {
        mc_client *host = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(host != NULL);
        int rc = host ? mc_mount(host, 32 * MiB, "host-b") : MC_ERR_INVALID;
        CHECK_EQ(rc, MC_OK);
        if (rc == MC_OK) batchMixedTcp(&s, ctcp, cshm, "host-b", "bh");
        mcClose(&host);
    }
    TEST("batch: a put session given twice to one end or revoke is ended and freed once (INVALID after)") {
        CHECK(c != NULL);
        if (c) {
            mc_key keys[2] = {{"bt:sess:a", 9}, {"bt:sess:b", 9}};
            size_t sizes[2] = {64, 64};
            mc_put_session *ss[2] = {NULL, NULL};
            int res[3] = {1, 1, 1};
            CHECK_EQ(mc_put_session_start(c, 2, keys, sizes, NULL, ss, res), 2);
            mc_put_session *twice[3] = {ss[0], ss[0], ss[0]};
            CHECK_EQ(mc_put_session_revoke(c, 3, twice, res), 1);
            CHECK(res[0] == MC_OK && res[1] == MC_ERR_INVALID && res[2] == MC_ERR_INVALID);
            CHECK(strstr(mc_last_error(c), "twice") != NULL);
            mc_put_session *ends[2] = {ss[1], ss[1]};
            CHECK_EQ(mc_put_session_end(c, 2, ends, res), 1);
            CHECK(res[0] == MC_OK && res[1] == MC_ERR_INVALID);
            CHECK_EQ(mc_exists(c, "bt:sess:a", 9), 0); /* revoked */
            CHECK_EQ(mc_exists(c, "bt:sess:b", 9), 1); /* published once */
        }
    }
    mcClose(&c);
    mcClose(&ctcp);
    mcClose(&cshm);
    free(vals);
    tsGroupFinish(&s, group, failed0);
}

/* ==== exists: mc_batch_exists (BATCH.EXISTS) and mc_remove_all ==================================== */

static void keysOf(mc_key *keys, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) keys[i] = (mc_key){names[i], strlen(names[i])};
}

/* 1 if res[0..n) is want[0..n); says where it differs. */
static int sameInts(const char *what, const int *res, const int *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (res[i] != want[i]) {
            fprintf(stderr, "  %s: result %zu is %d, expected %d\n", what, i, res[i], want[i]);
            return 0;
        }
    return 1;
}

void testExists(void) {
    const char *group = "exists";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", NULL), &s, group)) return;
    redisContext *r = rTcp(&s);
    mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    char v[4096], got[4096];
    fillPattern(v, sizeof(v), 21);
    /* ex:0 ex:1 ex:3 ex:4 objects, ex:str a SET value, ex:pend a put not ended, ex:2 nothing. */
    TEST("exists: setup (4 objects, a string, a pending put)") {
        CHECK(r && c);
        for (int i = 0; i < 5; i++) {
            char k[16];
            snprintf(k, sizeof(k), "ex:%d", i);
            if (i != 2) CHECK_EQ(put(c, k, v, sizeof(v), NULL), MC_OK);
        }
        freeReplyObject(rcmd(r, "SET ex:str hello"));
        redisReply *p = rcmd(r, "PUT.START ex:pend 100");
        CHECK(p && p->type == REDIS_REPLY_ARRAY);
        freeReplyObject(p);
    }
    TEST("exists: per key 1 for objects and strings, 0 for absent and pending; returns the count") {
        const char *names[] = {"ex:0", "ex:2", "ex:str", "ex:pend", "ex:4", "ex:0"};
        const int want[] = {1, 0, 1, 0, 1, 1};
        mc_key keys[6];
        int res[6];
        keysOf(keys, names, 6);
        CHECK_EQ(mc_batch_exists(c, 6, keys, 0, res), 4);
        CHECK(sameInts("mc_batch_exists", res, want, 6));
        /* No lease without MC_EXISTS_LEASE. */
        CHECK_EQ(leaseMs(r, "ex:0"), 0);
    }
    TEST("exists: PREFIX counts the leading keys present; results past the prefix are 0") {
        const char *names[] = {"ex:0", "ex:1", "ex:2", "ex:3", "ex:4"};
        const int want[] = {1, 1, 0, 0, 0};
        mc_key keys[5];
        int res[5];
        keysOf(keys, names, 5);
        CHECK_EQ(mc_batch_exists(c, 5, keys, MC_EXISTS_PREFIX, res), 2);
        CHECK(sameInts("PREFIX", res, want, 5));
        CHECK_EQ(mc_batch_exists(c, 2, keys, MC_EXISTS_PREFIX, res), 2);
        CHECK_EQ(mc_batch_exists(c, 3, keys + 2, MC_EXISTS_PREFIX, res), 0);
        CHECK(res[0] == 0 && res[1] == 0 && res[2] == 0);
        /* Without PREFIX the keys after the miss are still looked at. */
        CHECK_EQ(mc_batch_exists(c, 5, keys, 0, res), 4);
    }
    TEST("exists: LEASE grants a read lease on each key found (PREFIX: only those counted)") {
        const char *names[] = {"ex:0", "ex:1", "ex:2", "ex:3"};
        mc_key keys[4];
        int res[4];
        keysOf(keys, names, 4);
        CHECK_EQ(mc_batch_exists(c, 4, keys, MC_EXISTS_PREFIX | MC_EXISTS_LEASE, res), 2);
        long long ms0 = leaseMs(r, "ex:0"), ms1 = leaseMs(r, "ex:1");
        CHECK(ms0 > 9000 && ms0 <= 10000);
        CHECK(ms1 > 9000 && ms1 <= 10000);
        CHECK_EQ(leaseMs(r, "ex:3"), 0);
        /* The get that follows finds it, and its LEASE.RELEASE ends the
         * probe's grant (the oldest); the get's own runs to lease-ttl. */
        CHECK_EQ(mc_get(c, "ex:0", 4, got, sizeof(got)), (long long)sizeof(got));
        CHECK(memcmp(got, v, sizeof(v)) == 0);
        CHECK_EQ(mc_exists(c, "ex:0", 4), 1); /* a round trip after the release */
        ms0 = leaseMs(r, "ex:0");
        CHECK(ms0 > 9000 && ms0 <= 10000);
    }
    TEST("exists: invalid arguments (no key array, no results, empty key, unknown flags); n == 0 is 0") {
        mc_key keys[2] = {{"ex:0", 4}, {"", 0}};
        int res[2] = {7, 7};
        CHECK_EQ(mc_batch_exists(NULL, 1, keys, 0, res), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 1, NULL, 0, res), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 1, keys, 0, NULL), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 1, keys, 4, res), MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 2, keys, 0, res), MC_ERR_INVALID);
        CHECK(res[0] == MC_ERR_INVALID && res[1] == MC_ERR_INVALID);
        CHECK_EQ(mc_batch_exists(c, 0, NULL, 0, NULL), 0);
        keys[1] = (mc_key){NULL, 3};
        CHECK_EQ(mc_batch_exists(c, 2, keys, MC_EXISTS_PREFIX, res), MC_ERR_INVALID);
        /* The handle still works. */
        CHECK_EQ(mc_batch_exists(c, 1, keys, 0, res), 1);
    }
    TEST("exists: a server that refuses the command fails the batch as a whole (MC_ERR_AUTH)") {
        freeReplyObject(rcmd(r, "ACL SETUSER noexists on >p1 ~* +@all -batch.exists"));
        char err[256] = "";
        mc_client *u = mc_connect_user(s.tcp_uri, "noexists", "p1", err, sizeof(err));
        mc_key keys[2] = {{"ex:0", 4}, {"ex:1", 4}};
        int res[2];
        CHECK(u != NULL);
        CHECK_EQ(mc_batch_exists(u, 2, keys, 0, res), MC_ERR_AUTH);
        CHECK(res[0] == MC_ERR_AUTH && res[1] == MC_ERR_AUTH);
        mcClose(&u);
    }
    TEST("exists: mc_remove_all removes every key (pending puts included) and returns how many") {
        CHECK_EQ(mc_remove_all(NULL), MC_ERR_INVALID);
        CHECK_EQ(mc_remove_all(c), 6); /* ex:0 ex:1 ex:3 ex:4 ex:str ex:pend */
        CHECK_EQ(mc_exists(c, "ex:0", 4), 0);
        CHECK_EQ(mc_exists(c, "ex:str", 6), 0);
        CHECK_EQ(mc_remove_all(c), 0);
    }
    mcClose(&c);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}

/* ==== 17. scatter-gather (mc_put_fromv, mc_get_intov, mc_batch_putv/getv) ==== */

/* Buffers for scatter-gather calls: pieces carved out of one registered
 * arena, each followed by a gap of guard bytes, so a piece written past its
 * end, or a transfer that treats the pieces as contiguous, is caught. */
#define SG_GAP 64
#define SG_ARENA (40 * MiB)

typedef struct {
    char *arena;
    size_t used;
    struct iovec iov[MC_MAX_IOV + 1];
    int n;
} sgBufs;

/* Cuts total bytes into n uneven pieces (sizes drawn from seed, every
 * fifth piece and the second one empty when n > 2) placed in b's arena
 * after its current use. */
static void sgCut(sgBufs *b, size_t total, int n, uint64_t seed) {
    size_t *cut = xmalloc((size_t)(n + 1) * sizeof(size_t));
    cut[0] = 0;
    cut[n] = total;
    uint64_t s = seed | 1;
    for (int i = 1; i < n; i++) {
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        cut[i] = (size_t)((s * 0x2545F4914F6CDD1DULL) % (total + 1));
    }
    for (int i = 1; i < n; i++) /* sort: n is small or the cost is nothing */
        for (int j = i; j > 1 && cut[j] < cut[j - 1]; j--) {
            size_t t = cut[j];
            cut[j] = cut[j - 1];
            cut[j - 1] = t;
        }
    for (int i = 1; i < n; i++)
        if (n > 2 && (i == 2 || i % 5 == 0)) cut[i] = cut[i - 1]; /* an empty piece */
    b->n = n;
    for (int i = 0; i < n; i++) {
        size_t len = cut[i + 1] - cut[i];
        b->iov[i].iov_base = b->arena + b->used;
        b->iov[i].iov_len = len;
        memset(b->arena + b->used + len, GUARD_BYTE, SG_GAP);
        b->used += len + SG_GAP + (size_t)(i % 7); /* odd alignments too */
    }
    free(cut);
}

static size_t sgTotal(const sgBufs *b) {
    size_t t = 0;
    for (int i = 0; i < b->n; i++) t += b->iov[i].iov_len;
    return t;
}

/* Scatters src into the pieces / gathers them into dst. */
static void sgScatter(sgBufs *b, const char *src) {
    for (int i = 0; i < b->n; i++) {
        memcpy(b->iov[i].iov_base, src, b->iov[i].iov_len);
        src += b->iov[i].iov_len;
    }
}

static void sgGather(const sgBufs *b, char *dst) {
    for (int i = 0; i < b->n; i++) {
        memcpy(dst, b->iov[i].iov_base, b->iov[i].iov_len);
        dst += b->iov[i].iov_len;
    }
}

static int sgGuardsIntact(const sgBufs *b) {
    for (int i = 0; i < b->n; i++) {
        const unsigned char *g = (const unsigned char *)b->iov[i].iov_base + b->iov[i].iov_len;
        for (int k = 0; k < SG_GAP; k++)
            if (g[k] != GUARD_BYTE) {
                fprintf(stderr, "  piece %d of %d (%zu bytes) overrun at guard byte %d\n", i, b->n, b->iov[i].iov_len, k);
                return 0;
            }
    }
    return 1;
}

/* Fresh pieces of the arena (the arena is reused from its start). */
static void sgReset(sgBufs *b) { b->used = 0; }

/* mc_put_fromv of total bytes in nput pieces, then mc_get_intov into nget
 * other pieces; byte for byte, guards intact, moved by transport. */
static void sgRoundTrip(mc_client *c, sgBufs *b, const char *tag, size_t total, int nput, int nget, int transport,
                        char *want, char *got) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    char key[96];
    snprintf(key, sizeof(key), "sg:%s:%zu:%d:%d", tag, total, nput, nget);
    fillPattern(want, total, seedOf(key, total));
    sgReset(b);
    sgCut(b, total, nput, seedOf(key, 1));
    sgScatter(b, want);
    mc_put_opts o = {0};
    o.replace = 1;
    int rc = mc_put_fromv(c, key, strlen(key), b->iov, b->n, &o);
    if (rc != MC_OK) fprintf(stderr, "  mc_put_fromv(%s): %d %s (%s)\n", key, rc, mc_strerror(rc), lastErr(c));
    CHECK_EQ(rc, MC_OK);
    CHECK_EQ(mc_last_transport(c), transport);
    sgBufs *g = xmalloc(sizeof(*g));
    g->arena = b->arena;
    g->used = b->used;
    sgCut(g, total, nget, seedOf(key, 2));
    for (int i = 0; i < g->n; i++) memset(g->iov[i].iov_base, 0, g->iov[i].iov_len);
    long long r = mc_get_intov(c, key, strlen(key), g->iov, g->n);
    if (r < 0) fprintf(stderr, "  mc_get_intov(%s): %s\n", key, lastErr(c));
    sgGather(g, got);
    CHECK(sameBytes(key, got, r, want, total));
    CHECK(sgGuardsIntact(g));
    CHECK(sgGuardsIntact(b));
    CHECK_EQ(mc_last_transport(c), transport);
    free(g);
}

/* A batch of v items over c: some keys stored in pieces, a missing key, a
 * too-small set of buffers, an existing key in the put. Each item's result
 * stands alone; values are small and large so that vector commands
 * (SEG.WRITEV/READV) carry multi-piece items over tcp. */
static void sgBatch(mc_client *c, sgBufs *b, const char *tag, char *want, char *got) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    enum { NB = 8 };
    static const size_t sizes[NB] = {100, 4 * KiB + 1, 20 * KiB, 3 * KiB, 200 * KiB + 7, 1 * MiB + 5, 60 * KiB, 5};
    static const int pieces[NB] = {3, 2, 7, 1, 5, 4, 64, 2};
    char keys[NB][64];
    mc_kvv items[NB + 1];
    sgBufs *pb = xmalloc(sizeof(*pb) * NB);
    size_t off = 0;
    sgReset(b);
    for (int i = 0; i < NB; i++) {
        snprintf(keys[i], sizeof(keys[i]), "sgb:%s:%d", tag, i);
        fillPattern(want + off, sizes[i], seedOf(keys[i], sizes[i]));
        pb[i].arena = b->arena;
        pb[i].used = b->used;
        sgCut(&pb[i], sizes[i], pieces[i], seedOf(keys[i], 7));
        b->used = pb[i].used;
        sgScatter(&pb[i], want + off);
        items[i] = (mc_kvv){keys[i], strlen(keys[i]), pb[i].iov, pb[i].n};
        off += sizes[i];
    }
    int pres[NB + 1];
    for (int i = 0; i < NB; i++) pres[i] = 12345;
    int ok = mc_batch_putv(c, NB, items, NULL, pres);
    if (ok != NB) fprintf(stderr, "  mc_batch_putv: %d (%s)\n", ok, lastErr(c));
    CHECK_EQ(ok, NB);
    for (int i = 0; i < NB; i++) CHECK_EQ(pres[i], MC_OK);
    /* Again with an existing key (keys[3]) among new ones: EXISTS alone. */
    char k2[2][64];
    snprintf(k2[0], sizeof(k2[0]), "sgb:%s:new0", tag);
    snprintf(k2[1], sizeof(k2[1]), "sgb:%s:new1", tag);
    mc_kvv again[3] = {{k2[0], strlen(k2[0]), pb[0].iov, pb[0].n},
                       {keys[3], strlen(keys[3]), pb[2].iov, pb[2].n},
                       {k2[1], strlen(k2[1]), pb[4].iov, pb[4].n}};
    int ares[3] = {1, 1, 1};
    CHECK_EQ(mc_batch_putv(c, 3, again, NULL, ares), 2);
    CHECK_EQ(ares[0], MC_OK);
    CHECK_EQ(ares[1], MC_ERR_EXISTS);
    CHECK_EQ(ares[2], MC_OK);
    /* Gets into other pieces: every item, a missing key in the middle, and
     * keys[5] into buffers one byte short. */
    sgBufs *gb = xmalloc(sizeof(*gb) * (NB + 1));
    mc_kvv gitems[NB + 2];
    size_t gm = 0;
    for (int i = 0; i < NB; i++) {
        size_t cap = i == 5 ? sizes[i] - 1 : i == 1 ? sizes[i] + 999 : sizes[i]; /* 1: larger than the value */
        gb[i].arena = b->arena;
        gb[i].used = b->used;
        sgCut(&gb[i], cap, pieces[(i + 3) % NB], seedOf(keys[i], 9));
        b->used = gb[i].used;
        for (int j = 0; j < gb[i].n; j++) memset(gb[i].iov[j].iov_base, 0, gb[i].iov[j].iov_len);
        gitems[gm++] = (mc_kvv){keys[i], strlen(keys[i]), gb[i].iov, gb[i].n};
        if (i == 3) {
            static const struct iovec none[1] = {{NULL, 0}};
            gitems[gm++] = (mc_kvv){"sgb:missing", 11, none, 1};
        }
    }
    long long gres[NB + 2];
    for (size_t i = 0; i < gm; i++) gres[i] = 12345;
    int got_ok = mc_batch_getv(c, gm, gitems, gres);
    CHECK_EQ(got_ok, NB - 1);
    CHECK_EQ(gres[4], MC_ERR_NOT_FOUND);
    off = 0;
    for (int i = 0, gi = 0; i < NB; i++, gi++) {
        if (i == 4) gi++; /* past the missing key */
        if (i == 5) {
            CHECK_EQ(gres[gi], MC_ERR_TOO_SMALL);
        } else {
            sgGather(&gb[i], got);
            CHECK(sameBytes(keys[i], got, gres[gi], want + off, sizes[i]));
            CHECK(sgGuardsIntact(&gb[i]));
        }
        off += sizes[i];
    }
    /* The new keys of the second put hold what they were given. */
    CHECK(getSame(c, k2[0], want, sizes[0], MC_TRANSPORT_AUTO));
    CHECK(getSame(c, k2[1], want + sizes[0] + sizes[1] + sizes[2] + sizes[3], sizes[4], MC_TRANSPORT_AUTO));
    free(pb);
    free(gb);
}

void testScatterGather(void) {
    const char *group = "scatter-gather";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "256mb", NULL), &s, group)) return;
    const size_t big = 8 * MiB + 12345;
    char *want = xmalloc(big), *got = xmalloc(big + GUARD);
    sgBufs *b = xmalloc(sizeof(*b));
    b->arena = xmalloc(SG_ARENA);
    struct {
        int transport, streams;
        const char *uri, *tag;
        mc_client *c;
    } paths[] = {{MC_TRANSPORT_SHM, 0, s.unix_uri, "shm", NULL},
                 {MC_TRANSPORT_TCP, 0, s.tcp_uri, "tcp", NULL},
                 {MC_TRANSPORT_TCP, 4, s.tcp_uri, "tcp4", NULL}};
    enum { NPATHS = sizeof(paths) / sizeof(paths[0]) };
    for (int p = 0; p < NPATHS; p++) {
        paths[p].c = mcOpen(paths[p].uri, NULL, paths[p].transport);
        if (paths[p].c && paths[p].streams) mc_set_streams(paths[p].c, paths[p].streams);
        if (paths[p].c) CHECK_EQ(mc_register(paths[p].c, b->arena, SG_ARENA, MC_MEM_HOST), MC_OK);
    }
    static const struct { size_t size; int nput, nget; } rt[] = {
        {1 * MiB + 3, 1, 1}, {1 * MiB + 3, 2, 3}, {300 * KiB + 1, 3, 2}, {1 * MiB + 3, 64, 7},
        {100, 64, 3},        {5, 3, 1},           {2 * MiB, 1024, 64},
    };
    for (int p = 0; p < NPATHS; p++) {
        for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++) {
            char name[200];
            snprintf(name, sizeof(name), "scatter-gather: over %s, %zu bytes put from %d buffers, got into %d", paths[p].tag,
                     rt[i].size, rt[i].nput, rt[i].nget);
            TEST(name) sgRoundTrip(paths[p].c, b, paths[p].tag, rt[i].size, rt[i].nput, rt[i].nget, paths[p].transport, want, got);
        }
    }
    TEST("scatter-gather: over tcp with 4 streams, 8 MiB+12345 from 3 pieces (odd cuts) into 5, and 64 into 3") {
        sgRoundTrip(paths[2].c, b, "tcp4", big, 3, 5, MC_TRANSPORT_TCP, want, got);
        sgRoundTrip(paths[2].c, b, "tcp4", big, 64, 3, MC_TRANSPORT_TCP, want, got);
    }
    for (int p = 0; p < NPATHS; p++) {
        char name[200];
        snprintf(name, sizeof(name), "scatter-gather: over %s, mc_put then mc_get_intov, mc_put_fromv then mc_get", paths[p].tag);
        TEST(name) {
            mc_client *c = paths[p].c;
            CHECK(c != NULL);
            if (c) {
                size_t n = 3 * MiB + 17;
                char key[64];
                snprintf(key, sizeof(key), "sg:contig:%s", paths[p].tag);
                fillPattern(want, n, seedOf(key, n));
                mc_put_opts o = {0};
                o.replace = 1;
                CHECK_EQ(put(c, key, want, n, &o), MC_OK);
                sgReset(b);
                sgCut(b, n, 9, seedOf(key, 3));
                CHECK(sgTotal(b) == n);
                long long r = mc_get_intov(c, key, strlen(key), b->iov, b->n);
                sgGather(b, got);
                CHECK(sameBytes("contiguous put, scattered get", got, r, want, n));
                CHECK(sgGuardsIntact(b));
                snprintf(key, sizeof(key), "sg:scat:%s", paths[p].tag);
                fillPattern(want, n, seedOf(key, n));
                sgReset(b);
                sgCut(b, n, 11, seedOf(key, 4));
                sgScatter(b, want);
                CHECK_EQ(mc_put_fromv(c, key, strlen(key), b->iov, b->n, &o), MC_OK);
                CHECK(getSame(c, key, want, n, paths[p].transport));
            }
        }
    }
    TEST("scatter-gather: buffers one byte short are TOO_SMALL, untouched; larger ones take a prefix") {
        mc_client *c = paths[1].c;
        CHECK(c != NULL);
        if (c) {
            size_t n = 256 * KiB + 3;
            fillPattern(want, n, seedOf("sg:fit", n));
            mc_put_opts o = {0};
            o.replace = 1;
            CHECK_EQ(put(c, "sg:fit", want, n, &o), MC_OK);
            sgReset(b);
            sgCut(b, n - 1, 4, 5);
            for (int i = 0; i < b->n; i++) memset(b->iov[i].iov_base, 0x5A, b->iov[i].iov_len);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, b->iov, b->n), MC_ERR_TOO_SMALL);
            int untouched = 1;
            for (int i = 0; i < b->n; i++)
                for (size_t k = 0; k < b->iov[i].iov_len; k++)
                    if (((unsigned char *)b->iov[i].iov_base)[k] != 0x5A) untouched = 0;
            CHECK(untouched);
            /* 3 pieces of 100 KiB for a 256 KiB value: two full, the third
             * filled in part, the rest of it untouched. */
            sgReset(b);
            b->n = 3;
            for (int i = 0; i < 3; i++) {
                b->iov[i].iov_base = b->arena + (size_t)i * (100 * KiB + SG_GAP);
                b->iov[i].iov_len = 100 * KiB;
                memset(b->iov[i].iov_base, 0x5A, 100 * KiB + SG_GAP);
            }
            long long r = mc_get_intov(c, "sg:fit", 6, b->iov, b->n);
            sgGather(b, got);
            CHECK(sameBytes("smaller value into larger buffers", got, r, want, n));
            const unsigned char *tail = (const unsigned char *)b->iov[2].iov_base + (n - 200 * KiB);
            int rest = 1;
            for (size_t k = 0; k < 300 * KiB - n; k++)
                if (tail[k] != 0x5A) rest = 0;
            CHECK(rest);
        }
    }
    TEST("scatter-gather: iovcnt 0 and MC_MAX_IOV+1, a NULL base, unregistered memory, an empty put: INVALID") {
        mc_client *c = paths[0].c;
        CHECK(c != NULL);
        if (c) {
            sgReset(b);
            sgCut(b, 4096, MC_MAX_IOV + 1, 6);
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, b->iov, 0, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, b->iov, -1, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, b->iov, MC_MAX_IOV + 1, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, NULL, 1, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, b->iov, 0), MC_ERR_INVALID);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, b->iov, MC_MAX_IOV + 1), MC_ERR_INVALID);
            struct iovec nul[2] = {{b->arena, 10}, {NULL, 10}};
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, nul, 2, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, nul, 2), MC_ERR_INVALID);
            char stack[64];
            struct iovec unreg[2] = {{b->arena, 10}, {stack, sizeof(stack)}};
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, unreg, 2, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_get_intov(c, "sg:fit", 6, unreg, 2), MC_ERR_INVALID);
            struct iovec empty[2] = {{b->arena, 0}, {NULL, 0}};
            CHECK_EQ(mc_put_fromv(c, "sg:inv", 6, empty, 2, NULL), MC_ERR_INVALID);
            CHECK_EQ(mc_put_fromv(c, "", 0, b->iov, 2, NULL), MC_ERR_INVALID);
            mc_kvv bad[2] = {{"sg:inv0", 7, b->iov, 2}, {"sg:inv1", 7, nul, 2}};
            int pres[2] = {1, 1};
            long long gres[2] = {1, 1};
            CHECK_EQ(mc_batch_putv(c, 2, bad, NULL, pres), MC_ERR_INVALID);
            CHECK_EQ(pres[0], MC_ERR_INVALID);
            CHECK_EQ(mc_batch_getv(c, 2, bad, gres), MC_ERR_INVALID);
            bad[1].iovcnt = 0;
            CHECK_EQ(mc_batch_putv(c, 2, bad, NULL, pres), MC_ERR_INVALID);
            CHECK_EQ(mc_exists(c, "sg:inv", 6), 0);
            CHECK_EQ(mc_exists(c, "sg:inv0", 7), 0);
        }
    }
    for (int p = 0; p < NPATHS; p++) {
        char name[200];
        snprintf(name, sizeof(name), "scatter-gather: over %s, batch v: puts, an existing key, a missing key, too small", paths[p].tag);
        TEST(name) sgBatch(paths[p].c, b, paths[p].tag, want, got);
    }
    for (int p = 0; p < NPATHS; p++) mcClose(&paths[p].c);
    free(b->arena);
    free(b);
    free(want);
    free(got);
    tsGroupFinish(&s, group, failed0);
}

/* ==== ranges: mc_batch_get_ranges, and replica descriptions (mc_batch_replicas) ===================== */

/* Destinations carved from one registered buffer, each followed by guard
 * bytes, so a range that writes a byte past its length is caught. */
typedef struct {
    char *base;
    size_t cap, used;
} rgArena;

static char *rgTake(rgArena *a, size_t len) {
    size_t step = (len + GUARD + 63) & ~(size_t)63;
    if (a->used + step > a->cap) {
        fprintf(stderr, "  test arena of %zu bytes exhausted\n", a->cap);
        tsKillAll();
        abort();
    }
    char *p = a->base + a->used;
    a->used += step;
    memset(p, 0, len);
    setGuard(p, len);
    return p;
}

/* Range g read as want[src_off .. src_off+len) with result res, nothing
 * past its end written. */
static int rgSame(const char *what, const mc_range *g, long long res, const char *want) {
    char w[200];
    snprintf(w, sizeof(w), "%s [%llu, +%zu)", what, (unsigned long long)g->src_off, g->len);
    int ok = sameBytes(w, g->dst, res, want + g->src_off, g->len);
    return ok && guardIntact(g->dst, g->len);
}

#define RG_A 5000
#define RG_B (300 * KiB + 1)
#define RG_BIG (9 * MiB + 3)
#define RG_H (200 * KiB + 7)
#define RG_ARENA (24 * MiB)

/* The ranged-read tests over one handle (its transport forced). */
static void rgOver(mc_client *c, int transport, redisContext *r, rgArena *ar, const char *a, const char *b,
                   const char *big) {
    const char *tn = transportName(transport);
    static char name[200]; /* test_cur_name: the test ends inside TEST, but the compiler cannot see it */
    snprintf(name, sizeof(name), "ranges over %s: several ranges per key, one key in two items, ranges at the object's end, len 0", tn);
    TEST(name) {
        ar->used = 0;
        mc_range ra[4] = {{rgTake(ar, 100), 0, 100},
                          {rgTake(ar, 100), RG_A - 100, 100},
                          {rgTake(ar, 0), 1234, 0},
                          {rgTake(ar, 0), RG_A, 0}};
        mc_range rb[3] = {{rgTake(ar, 70000), 0, 70000}, {rgTake(ar, 10), RG_B - 10, 10}, {rgTake(ar, 1), 150000, 1}};
        mc_range ra2[2] = {{rgTake(ar, RG_A - 10), 10, RG_A - 10}, {rgTake(ar, RG_A), 0, RG_A}};
        mc_kranges items[3] = {{"rg:a", 4, ra, 4}, {"rg:b", 4, rb, 3}, {"rg:a", 4, ra2, 2}};
        long long res[9], want[9] = {100, 100, 0, 0, 70000, 10, 1, RG_A - 10, RG_A};
        for (int i = 0; i < 9; i++) res[i] = 12345;
        CHECK_EQ(rgBatch(c, 3, items, res), 9);
        CHECK(rgResults(name, res, want, 9));
        for (int i = 0; i < 4; i++) CHECK(rgSame("rg:a", &ra[i], res[i], a));
        for (int i = 0; i < 3; i++) CHECK(rgSame("rg:b", &rb[i], res[4 + i], b));
        for (int i = 0; i < 2; i++) CHECK(rgSame("rg:a (second item)", &ra2[i], res[7 + i], a));
        CHECK_EQ(mc_last_transport(c), transport);
        /* rg:a was granted two leases (one per item): both released. */
        CHECK(leaseEndsWithin(r, "rg:a", 2000));
        CHECK(leaseEndsWithin(r, "rg:b", 2000));
    }
    snprintf(name, sizeof(name), "ranges over %s: a range outside the object fails alone, the item's others are read", tn);
    TEST(name) {
        ar->used = 0;
        mc_range g[6] = {{rgTake(ar, 10), 0, 10},
                         {rgTake(ar, 6), RG_A - 5, 6},           /* one byte past the end */
                         {rgTake(ar, 0), RG_A + 1, 0},           /* an empty range past the end */
                         {rgTake(ar, 10), UINT64_MAX - 4, 10},   /* off + len wraps around */
                         {rgTake(ar, 16), 4 * (uint64_t)RG_A, 16},
                         {rgTake(ar, 10), RG_A - 10, 10}};
        mc_kranges item = {"rg:a", 4, g, 6};
        long long res[6], want[6] = {10, MC_ERR_INVALID, MC_ERR_INVALID, MC_ERR_INVALID, MC_ERR_INVALID, 10};
        CHECK_EQ(rgBatch(c, 1, &item, res), 2);
        CHECK(rgResults(name, res, want, 6));
        CHECK(rgSame("rg:a", &g[0], res[0], a));
        CHECK(rgSame("rg:a", &g[5], res[5], a));
        for (int i = 1; i <= 4; i++) CHECK(guardIntact(g[i].dst, g[i].len) && (g[i].len == 0 || ((char *)g[i].dst)[0] == 0));
        CHECK(strstr(lastErr(c), "not inside the object") != NULL);
    }
    snprintf(name, sizeof(name), "ranges over %s: unregistered dst fails alone; missing key NOT_FOUND, pending key NOT_READY in all their ranges", tn);
    TEST(name) {
        ar->used = 0;
        char unreg[32];
        mc_range ga[3] = {{rgTake(ar, 10), 0, 10}, {unreg, 0, 10}, {NULL, 7, 0}};
        mc_range gm[2] = {{rgTake(ar, 10), 0, 10}, {rgTake(ar, 5), 5, 5}};
        mc_range gp[1] = {{rgTake(ar, 10), 0, 10}};
        mc_range gb[1] = {{rgTake(ar, 200), 100, 200}};
        mc_kranges items[4] = {{"rg:a", 4, ga, 3}, {"rg:missing", 10, gm, 2}, {"rg:pending", 10, gp, 1}, {"rg:b", 4, gb, 1}};
        long long res[7], want[7] = {10, MC_ERR_INVALID, 0, MC_ERR_NOT_FOUND, MC_ERR_NOT_FOUND, MC_ERR_NOT_READY, 200};
        CHECK_EQ(rgBatch(c, 4, items, res), 3);
        CHECK(rgResults(name, res, want, 7));
        CHECK(rgSame("rg:a", &ga[0], res[0], a));
        CHECK(rgSame("rg:b", &gb[0], res[6], b));
        CHECK(((char *)gm[0].dst)[0] == 0 && guardIntact(gm[0].dst, 10) && ((char *)gp[0].dst)[0] == 0 && guardIntact(gp[0].dst, 10));
    }
    snprintf(name, sizeof(name), "ranges over %s: a 9 MiB object read in 41 pieces, in two items, is byte-exact", tn);
    TEST(name) {
        ar->used = 0;
        enum { NP = 41 };
        mc_range g[NP];
        long long res[NP], want[NP];
        uint64_t off = 0, s = seedOf("rg:pieces", 41);
        for (int i = 0; i < NP; i++) {
            /* Lengths from 1 B to 512 KiB: small ones share SEG.READVs,
             * large ones are SEG.READs of their own. */
            s = mix64(s);
            size_t len = i == NP - 1 ? RG_BIG - off : (size_t)(s % (i % 3 ? 512 * KiB : 3000)) + 1;
            if (off + len > RG_BIG) len = RG_BIG - off;
            g[i] = (mc_range){rgTake(ar, len), off, len};
            want[i] = (long long)len;
            off += len;
        }
        CHECK_EQ(off, RG_BIG);
        mc_kranges items[2] = {{"rg:big", 6, g, 20}, {"rg:big", 6, g + 20, NP - 20}};
        CHECK_EQ(rgBatch(c, 2, items, res), NP);
        CHECK(rgResults(name, res, want, NP));
        for (int i = 0; i < NP; i++) CHECK(rgSame("rg:big", &g[i], res[i], big));
        CHECK_EQ(mc_last_transport(c), transport);
    }
}

/* Describes keys[0..n) with c; the mc_batch_replicas return value. */
static int rpDescribe(mc_client *c, size_t n, const char *const *names, mc_replicas *out, int *res) {
    mc_key keys[8];
    keysOf(keys, names, n);
    int rc = mc_batch_replicas(c, n, keys, out, res);
    if (rc < 0) fprintf(stderr, "  mc_batch_replicas: %d %s (%s)\n", rc, mc_strerror(rc), lastErr(c));
    return rc;
}

/* A description's replica j is segment seg at the offset GET.REPLICAS
 * lists, its length size, named name, served at endpoint. */
static int rpReplicaIs(const mc_replicas *d, int j, long long seg, long long off, uint64_t size, const char *name,
                       const char *endpoint) {
    const mc_replica_info *x = &d->replicas[j];
    int ok = (long long)x->seg_id == seg && (long long)x->offset == off && x->len == size && d->size == size &&
             !strcmp(x->seg_name, name) && !strcmp(x->endpoint, endpoint);
    if (!ok)
        fprintf(stderr, "  replica %d: seg %llu '%s' at %llu, %llu of %llu bytes, endpoint '%s'; expected seg %lld '%s' at %lld, %llu bytes, '%s'\n",
                j, (unsigned long long)x->seg_id, x->seg_name, (unsigned long long)x->offset, (unsigned long long)x->len,
                (unsigned long long)d->size, x->endpoint, seg, name, off, (unsigned long long)size, endpoint);
    return ok;
}

void testRanges(void) {
    const char *group = "ranges";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--lease-ttl", "10000", "--segment-size", "128mb", NULL), &s, group)) return;
    redisContext *r = rTcp(&s), *rp = rTcp(&s);
    mc_client *cshm = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
    mc_client *ctcp = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
    mc_client *host = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_AUTO);
    char *a = xmalloc(RG_A), *b = xmalloc(RG_B), *big = xmalloc(RG_BIG), *h = xmalloc(RG_H);
    rgArena ar = {xmalloc(RG_ARENA), RG_ARENA, 0};
    fillPattern(a, RG_A, seedOf("rg:a", RG_A));
    fillPattern(b, RG_B, seedOf("rg:b", RG_B));
    fillPattern(big, RG_BIG, seedOf("rg:big", RG_BIG));
    fillPattern(h, RG_H, seedOf("rg:h", RG_H));
    long long host_seg = -1;

    TEST("ranges: put the objects, a pending put (hiredis), a segment hosted by a third handle, buffers registered") {
        CHECK(r && rp && cshm && ctcp && host);
        if (ctcp) {
            CHECK_EQ(put(ctcp, "rg:a", a, RG_A, NULL), MC_OK);
            CHECK_EQ(put(ctcp, "rg:b", b, RG_B, NULL), MC_OK);
            CHECK_EQ(put(ctcp, "rg:big", big, RG_BIG, NULL), MC_OK);
        }
        redisReply *p = rcmd(rp, "PUT.START rg:pending 100");
        CHECK(p && p->type == REDIS_REPLY_ARRAY);
        freeReplyObject(p);
        if (host) {
            CHECK_EQ(mc_mount(host, 16 * MiB, "rg-host"), MC_OK);
            host_seg = mc_mount_id(host);
            CHECK(host_seg > 1);
        }
        if (ctcp) {
            mc_put_opts o = {0};
            o.replicas = 2;
            o.prefer = "rg-host";
            CHECK_EQ(put(ctcp, "rg:h", h, RG_H, &o), MC_OK);
        }
        if (cshm) CHECK_EQ(mc_register(cshm, ar.base, ar.cap, MC_MEM_HOST), MC_OK);
        if (ctcp) CHECK_EQ(mc_register(ctcp, ar.base, ar.cap, MC_MEM_HOST), MC_OK);
    }
    if (cshm) rgOver(cshm, MC_TRANSPORT_SHM, r, &ar, a, b, big);
    if (ctcp) rgOver(ctcp, MC_TRANSPORT_TCP, r, &ar, a, b, big);
    TEST("ranges: items refused whole (empty key, nranges past MC_MAX_IOV) fill their slots; nranges 0 and < 0 have none") {
        ar.used = 0;
        mc_range *many = xmalloc((MC_MAX_IOV + 1) * sizeof(*many));
        char *d = rgTake(&ar, 10);
        for (int i = 0; i <= MC_MAX_IOV; i++) many[i] = (mc_range){d, 0, 10};
        mc_range one = {d, 0, 10};
        mc_kranges items[5] = {{NULL, 0, many, 2}, {"rg:a", 4, many, MC_MAX_IOV + 1}, {"rg:a", 4, many, -1},
                               {"rg:a", 4, NULL, 0}, {"rg:a", 4, &one, 1}};
        size_t slots = 2 + MC_MAX_IOV + 1 + 1;
        long long *res = xmalloc((slots + 1) * sizeof(*res));
        for (size_t i = 0; i <= slots; i++) res[i] = 777;
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK_EQ(rgBatch(ctcp, 5, items, res), 1);
            int bad = 0;
            for (size_t i = 0; i + 1 < slots; i++) bad += res[i] != MC_ERR_INVALID;
            CHECK_EQ(bad, 0);
            CHECK_EQ(res[slots - 1], 10);
            CHECK_EQ(res[slots], 777); /* nothing written past the last slot */
            CHECK(rgSame("rg:a", &one, res[slots - 1], a));
            CHECK_EQ(mc_batch_get_ranges(ctcp, 0, NULL, NULL), 0);
            CHECK_EQ(mc_batch_get_ranges(NULL, 1, items, res), MC_ERR_INVALID);
            CHECK_EQ(mc_batch_get_ranges(ctcp, 1, NULL, res), MC_ERR_INVALID);
        }
        free(res);
        free(many);
    }
    TEST("ranges: an object in a client-hosted segment (mc_mount), over tcp and shm, byte-exact") {
        for (int p = 0; p < 2; p++) {
            mc_client *c = p ? cshm : ctcp;
            if (!c) continue;
            ar.used = 0;
            mc_range g[3] = {{rgTake(&ar, 100 * KiB), 0, 100 * KiB},
                             {rgTake(&ar, 77), RG_H - 77, 77},
                             {rgTake(&ar, 4096), 150 * KiB, 4096}};
            mc_kranges item = {"rg:h", 4, g, 3};
            long long res[3], want[3] = {100 * KiB, 77, 4096};
            CHECK_EQ(rgBatch(c, 1, &item, res), 3);
            CHECK(rgResults("rg:h", res, want, 3));
            for (int i = 0; i < 3; i++) CHECK(rgSame("rg:h", &g[i], res[i], h));
            CHECK_EQ(mc_last_transport(c), p ? MC_TRANSPORT_SHM : MC_TRANSPORT_TCP);
        }
    }
    char self_tcp[96];
    snprintf(self_tcp, sizeof(self_tcp), "tcp://127.0.0.1:%d", s.port);
    TEST("replicas: pool objects: segment 1 'self' at the offset GET.REPLICAS lists, the size, the server's tcp endpoint") {
        long long segs[2][4], offs[2][4];
        const char *names[2] = {"rg:a", "rg:big"};
        for (int i = 0; i < 2; i++) {
            CHECK_EQ(replicaList(r, names[i], segs[i], offs[i], 4), 1);
            freeReplyObject(rcmd(r, "LEASE.RELEASE %s", names[i]));
        }
        mc_replicas out[2];
        int res[2] = {99, 99};
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK_EQ(rpDescribe(ctcp, 2, names, out, res), 2);
            CHECK(res[0] == 1 && res[1] == 1);
            CHECK(out[0].nreplicas == 1 && out[1].nreplicas == 1);
            CHECK(rpReplicaIs(&out[0], 0, 1, offs[0][0], RG_A, "self", self_tcp));
            CHECK(rpReplicaIs(&out[1], 0, 1, offs[1][0], RG_BIG, "self", self_tcp));
            CHECK(leaseEndsWithin(r, "rg:a", 2000));
            CHECK(leaseEndsWithin(r, "rg:big", 2000));
        }
    }
    TEST("replicas: an object in a client-hosted segment (mc_mount): its id, name and the host's tcp endpoint, then self") {
        char host_tcp[300];
        segEndpoint(r, "rg-host", "tcp://", host_tcp, sizeof(host_tcp));
        CHECK(host_tcp[0] != '\0');
        long long segs[4], offs[4];
        CHECK_EQ(replicaList(r, "rg:h", segs, offs, 4), 2);
        freeReplyObject(rcmd(r, "LEASE.RELEASE rg:h"));
        const char *names[1] = {"rg:h"};
        mc_replicas out[1];
        int res[1];
        for (int p = 0; p < 2; p++) { /* the shm handle reached the server over its unix socket */
            mc_client *c = p ? cshm : ctcp;
            if (!c) continue;
            CHECK_EQ(rpDescribe(c, 1, names, out, res), 1);
            CHECK_EQ(res[0], 2);
            CHECK_EQ(out[0].nreplicas, 2);
            CHECK(rpReplicaIs(&out[0], 0, host_seg, offs[0], RG_H, "rg-host", host_tcp));
            CHECK(rpReplicaIs(&out[0], 1, 1, offs[1], RG_H, "self", self_tcp));
            CHECK(leaseEndsWithin(r, "rg:h", 2000));
        }
    }
    TEST("replicas: missing and pending keys beside a present one; one key twice; no lease left behind") {
        const char *names[4] = {"rg:missing", "rg:pending", "rg:b", "rg:b"};
        mc_replicas *out = xmalloc(4 * sizeof(*out));
        memset(out, 0xff, 4 * sizeof(*out));
        int res[4];
        CHECK(ctcp != NULL);
        if (ctcp) {
            CHECK_EQ(rpDescribe(ctcp, 4, names, out, res), 2);
            CHECK_EQ(res[0], MC_ERR_NOT_FOUND);
            CHECK_EQ(res[1], MC_ERR_NOT_READY);
            CHECK(res[2] == 1 && res[3] == 1);
            CHECK(out[0].nreplicas == 0 && out[0].size == 0 && out[1].nreplicas == 0 && out[1].size == 0);
            CHECK(out[2].size == RG_B && out[3].size == RG_B && out[2].replicas[0].offset == out[3].replicas[0].offset);
            CHECK(out[2].replicas[1].seg_id == 0 && out[2].replicas[1].seg_name[0] == '\0'); /* zeroed */
            CHECK(leaseEndsWithin(r, "rg:b", 2000));
            mc_key empty[2] = {{"rg:a", 4}, {"", 0}};
            CHECK_EQ(mc_batch_replicas(ctcp, 2, empty, out, res), MC_ERR_INVALID);
            CHECK(res[0] == MC_ERR_INVALID && res[1] == MC_ERR_INVALID);
            CHECK_EQ(mc_batch_replicas(ctcp, 0, NULL, NULL, NULL), 0);
        }
        free(out);
    }
    freeReplyObject(rcmd(rp, "PUT.REVOKE rg:pending"));
    mcClose(&cshm);
    mcClose(&ctcp);
    mcClose(&host);
    rClose(&r);
    rClose(&rp);
    free(a);
    free(b);
    free(big);
    free(h);
    free(ar.base);
    tsGroupFinish(&s, group, failed0);
}
