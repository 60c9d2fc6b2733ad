/* test_mooncake_threads.c -- concurrency: threads sharing keys, and a writer
 * killed in the middle of a put.
 *
 *  - threads: four handles, and one shared handle, replacing and reading
 *    the same keys; every value carries a header and checksum, so a torn
 *    or mixed read is caught.
 *  - abandoned: a writer killed in the middle of a put: the object stays
 *    pending (NOTREADY, never half visible) until put-timeout, then a new
 *    put takes the key over.
 *
 * Together because both race a reader against a writer that is not done.
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main();
 * test_mooncake.h: the shared helpers).
 */
#include "test_mooncake.h"

/* ==== 6. threads ======================================================================= */

/* A value (mctest.h's vvMake), of a length its version picks. */
#define CC_KEYS 4
#define CC_MAX (64 * KiB + sizeof(vvHeader))
#define CC_THREADS 4
#define CC_ITERS 250

static size_t ccLen(uint64_t key, uint64_t version) {
    return sizeof(vvHeader) + 4 * KiB + (size_t)(mix64(version * 131 + key) % (60 * KiB));
}

static size_t ccMake(char *buf, int key, uint64_t version) {
    return vvMake(buf, ccLen((uint64_t)key, version), (uint64_t)key, version);
}

static const char *ccCheck(const char *buf, long long n, int key, char *scratch) {
    return vvCheck(buf, n, (uint64_t)key, ccLen, scratch);
}

typedef struct {
    mc_client *c;
    int id;
    long long deadline_ms;
    int puts_ok, puts_busy, gets_ok, failures;
    char first_failure[256];
} ccWorker;

static void ccFail(ccWorker *w, const char *fmt, ...) {
    if (w->failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->first_failure, sizeof(w->first_failure), fmt, ap);
        va_end(ap);
    }
}

static void *ccThread(void *arg) {
    ccWorker *w = arg;
    char *buf = xmalloc(CC_MAX), *scratch = xmalloc(CC_MAX);
    uint64_t rng = mix64((uint64_t)w->id + 77);
    mc_put_opts replace = {0};
    replace.replace = 1;
    for (int i = 0; i < CC_ITERS && tsNowMs() < w->deadline_ms; i++) {
        rng = mix64(rng);
        int key = (int)(rng % CC_KEYS);
        char k[32];
        snprintf(k, sizeof(k), "cc:%d", key);
        if ((rng >> 20) % 3 == 0) {
            uint64_t version = ((uint64_t)(w->id + 1) << 32) | (uint64_t)(i + 1);
            size_t len = ccMake(buf, key, version);
            int rc = mc_put(w->c, k, strlen(k), buf, len, &replace);
            if (rc == MC_OK) w->puts_ok++;
            else if (rc == MC_ERR_EXISTS) w->puts_busy++; /* another put of k in flight */
            else ccFail(w, "thread %d: mc_put(%s): %d %s (%s)", w->id, k, rc, mc_strerror(rc), lastErr(w->c));
        } else {
            long long n = mc_get(w->c, k, strlen(k), buf, CC_MAX);
            if (n < 0) {
                ccFail(w, "thread %d: mc_get(%s): %lld %s (%s)", w->id, k, n, mc_strerror((int)n), lastErr(w->c));
                continue;
            }
            const char *why = ccCheck(buf, n, key, scratch);
            if (why) ccFail(w, "thread %d: mc_get(%s) returned %lld bytes: %s", w->id, k, n, why);
            else w->gets_ok++;
        }
    }
    free(buf);
    free(scratch);
    return NULL;
}

/* Runs the workers on the given handles (one per thread, or one shared). */
static void ccRun(mc_client **handles, int nhandles) {
    for (int h = 0; h < nhandles; h++)
        if (!handles[h]) {
            CHECK(handles[h] != NULL);
            return;
        }
    ccWorker w[CC_THREADS];
    pthread_t t[CC_THREADS];
    long long deadline = tsNowMs() + 10000;
    for (int i = 0; i < CC_THREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].c = handles[i % nhandles];
        w[i].id = i;
        w[i].deadline_ms = deadline;
        CHECK(pthread_create(&t[i], NULL, ccThread, &w[i]) == 0);
    }
    int puts_ok = 0, puts_busy = 0, gets_ok = 0, failures = 0;
    for (int i = 0; i < CC_THREADS; i++) {
        pthread_join(t[i], NULL);
        puts_ok += w[i].puts_ok;
        puts_busy += w[i].puts_busy;
        gets_ok += w[i].gets_ok;
        failures += w[i].failures;
        if (w[i].failures) fprintf(stderr, "  %d failures, the first: %s\n", w[i].failures, w[i].first_failure);
    }
    CHECK_EQ(failures, 0);
    CHECK(puts_ok > 0);
    CHECK(gets_ok > 0);
    fprintf(stderr, "  (puts %d, refused while another was in progress %d, whole gets %d)\n", puts_ok, puts_busy,
            gets_ok);
}

/* Every key gets a first version, so that every later get has one to find. */
static void ccPopulate(mc_client *c) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    char *buf = xmalloc(CC_MAX);
    mc_put_opts replace = {0};
    replace.replace = 1;
    for (int key = 0; key < CC_KEYS; key++) {
        char k[32];
        snprintf(k, sizeof(k), "cc:%d", key);
        size_t len = ccMake(buf, key, 0);
        CHECK_EQ(put(c, k, buf, len, &replace), MC_OK);
    }
    free(buf);
}

void testConcurrency(void) {
    const char *group = "threads";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, NULL), &s, group)) return;
    TEST("threads: 4 handles (2 shm, 2 tcp) replace and read 4 keys; every get is one whole version") {
        mc_client *h[CC_THREADS];
        for (int i = 0; i < CC_THREADS; i++)
            h[i] = i % 2 ? mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP) : mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
        ccPopulate(h[0]);
        ccRun(h, CC_THREADS);
        for (int i = 0; i < CC_THREADS; i++) mcClose(&h[i]);
    }
    TEST("threads: 4 threads share one handle; every get is one whole version") {
        mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        ccPopulate(c);
        ccRun(&c, 1);
        mcClose(&c);
    }
    tsGroupFinish(&s, group, failed0);
}

/* ==== 7. a writer killed in the middle of a put =========================================== */

/* The child: PUT.START key size on a raw connection, then a SEG.WRITE of
 * the whole extent whose payload stops after `partial` bytes; says 'R' on
 * wfd and waits to be killed. Raw syscalls only (it is a bare fork). */
static void abandonedWriter(pid_t parent, int port, const char *key, size_t size, size_t partial, int wfd) {
    tsDieWithParent(parent);
    int fd = tsConnectTcp(port);
    char req[512], rep[512];
    int n = snprintf(req, sizeof(req), "*3\r\n$9\r\nPUT.START\r\n$%zu\r\n%s\r\n$%d\r\n%zu\r\n", strlen(key), key,
                     snprintf(NULL, 0, "%zu", size), size);
    if (fd < 0 || tsWriteAll(fd, req, (size_t)n) != 0) _exit(1);
    size_t got = 0;
    int lines = 0;
    long long seg = -1, off = -1, len = -1;
    /* The reply: *1 *3 :seg :offset :length, five lines; or one error line. */
    while (got < sizeof(rep) - 1) {
        ssize_t r = read(fd, rep + got, sizeof(rep) - 1 - got);
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) lines += rep[got + (size_t)i] == '\n';
        got += (size_t)r;
        if ((rep[0] == '-' && lines >= 1) || lines >= 5) break;
    }
    rep[got] = '\0';
    if (rep[0] != '*' || sscanf(rep, "*%*d\r\n*3\r\n:%lld\r\n:%lld\r\n:%lld", &seg, &off, &len) != 3 ||
        len != (long long)size) {
        if (tsWriteAll(wfd, "E", 1)) {}
        _exit(1);
    }
    char segs[32], offs[32];
    int sl = snprintf(segs, sizeof(segs), "%lld", seg), ol = snprintf(offs, sizeof(offs), "%lld", off);
    n = snprintf(req, sizeof(req), "*4\r\n$9\r\nSEG.WRITE\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%zu\r\n", sl, segs, ol, offs,
                 size);
    char *payload = malloc(partial);
    if (!payload) _exit(1);
    memset(payload, 'x', partial);
    if (tsWriteAll(fd, req, (size_t)n) != 0 || tsWriteAll(fd, payload, partial) != 0) _exit(1);
    if (tsWriteAll(wfd, "R", 1)) {}
    for (;;) pause();
}

void testAbandonedPut(void) {
    const char *group = "abandoned put";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--put-timeout", "200", NULL), &s, group)) return;
    const char *key = "ab:key";
    const size_t n = 1 * MiB;
    redisContext *r = rTcp(&s);
    mc_client *c = NULL;
    pid_t child = -1;
    long long t_ready = 0;

    TEST("abandoned put: a raw writer does PUT.START of 1 MiB and a partial SEG.WRITE, then is SIGKILLed") {
        int p[2];
        CHECK(pipe(p) == 0);
        pid_t parent = getpid();
        child = fork();
        if (child == 0) {
            close(p[0]);
            abandonedWriter(parent, s.port, key, n, 300 * KiB, p[1]);
        }
        close(p[1]);
        CHECK(child > 0);
        if (child > 0) tsTrack(child);
        struct pollfd pfd = {p[0], POLLIN, 0};
        char word = 0;
        if (poll(&pfd, 1, 10000) == 1 && read(p[0], &word, 1) == 1) t_ready = tsNowMs();
        close(p[0]);
        CHECK_EQ(word, 'R');
        /* While the writer lives: pending, not readable. */
        CHECK(expectError("NOTREADY", rcmd(r, "GET.REPLICAS %s", key), "GET.REPLICAS while the writer lives"));
        if (child > 0) {
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            tsUntrack(child);
        }
    }
    TEST("abandoned put: the key stays pending: GET.REPLICAS is NOTREADY, GET nil, EXISTS 0, mc_get NOT_READY") {
        CHECK(expectError("NOTREADY", rcmd(r, "GET.REPLICAS %s", key), "GET.REPLICAS"));
        redisReply *g = rcmd(r, "GET %s", key);
        CHECK(g && g->type == REDIS_REPLY_NIL);
        if (!(g && g->type == REDIS_REPLY_NIL)) showReply("GET", g);
        freeReplyObject(g);
        redisReply *e = rcmd(r, "EXISTS %s", key);
        CHECK_EQ(replyInt(e), 0);
        freeReplyObject(e);
        c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(c != NULL);
        if (c) {
            char *buf = xmalloc(n);
            long long got = get(c, key, buf, n);
            if (got != MC_ERR_NOT_READY) fprintf(stderr, "  mc_get: %lld %s (%s)\n", got, mc_strerror((int)got), lastErr(c));
            CHECK_EQ(got, MC_ERR_NOT_READY);
            free(buf);
        }
    }
    char *v = xmalloc(n);
    fillPattern(v, n, seedOf(key, n));
    TEST("abandoned put: within put-timeout a new put of the key is EXISTS") {
        /* Only meaningful while the pending put is surely younger than
         * put-timeout (200 ms): skipped on a machine too slow for that. */
        if (c && t_ready && tsNowMs() - t_ready < 100) {
            int rc = mc_put(c, key, strlen(key), v, n, NULL);
            CHECK_EQ(rc, MC_ERR_EXISTS);
        } else if (!c) {
            CHECK(c != NULL);
        } else {
            fprintf(stderr, "  (not checked: %lld ms have passed since the PUT.START)\n", tsNowMs() - t_ready);
        }
    }
    TEST("abandoned put: after put-timeout a new put takes the key over and reads back") {
        if (t_ready) {
            long long wait = t_ready + 300 - tsNowMs();
            if (wait > 0) tsSleepMs(wait);
        }
        CHECK(c != NULL);
        if (c) {
            CHECK_EQ(put(c, key, v, n, NULL), MC_OK);
            CHECK(getSame(c, key, v, n, MC_TRANSPORT_AUTO));
        }
        CHECK(redisGetSame(r, key, v, n));
    }
    free(v);
    mcClose(&c);
    rClose(&r);
    tsGroupFinish(&s, group, failed0);
}
