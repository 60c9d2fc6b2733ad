/* test_etcd.c -- the etcd client (src/etcd.c) against a real etcd.
 *
 * The test starts its own etcd (/usr/bin/etcd, Debian's etcd-server) on
 * free 127.0.0.1 ports with a data directory under a mkdtemp directory,
 * kills it (SIGKILL, a crash) and starts it again on the same ports and
 * data to see the watch and the request retries ride out an outage, and
 * removes everything at the end, also when a check fails or the watchdog
 * fires. Without /usr/bin/etcd it says SKIP and passes.
 *
 * The client is driven by a real aeEventLoop with a 5 ms timer: the timer's
 * largest gap shows whether anything blocked the loop while etcd was away.
 *
 * What a real etcd will not do on demand (a malformed integer or base64, an
 * empty reply, a watch stream cut mid-object by the chunking) comes from a
 * small fake HTTP server on a thread of this program.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "ae.h"
#include "etcd.h"
#include "sds.h"
#include "testhelp.h"
#include "testserver.h"

#define ETCD_BIN "/usr/bin/etcd"
#define WATCHDOG_S 180
/* How long to wait for what should come at once, and the request timeout
 * of the clients: generous, because the machine may be loaded (the loop's
 * 5 ms timer was seen to stall for 9 s beside a benchmark run). */
#define T_WAIT 15000

static aeEventLoop *el;

/* ---- our etcd -------------------------------------------------------------- */

static struct {
    pid_t pid;
    int port, peer;
    char dir[96], data[128], log[128], url[64];
} etcd;

static void removeDir(const char *dir) {
    if (!dir[0]) return;
    pid_t pid = fork(); /* fork and exec are async-signal-safe: usable from the watchdog */
    if (pid == 0) {
        execl("/bin/rm", "rm", "-rf", dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
}

static void etcdKill(void) {
    if (!etcd.pid) return;
    kill(etcd.pid, SIGKILL);
    waitpid(etcd.pid, NULL, 0);
    tsUntrack(etcd.pid);
    etcd.pid = 0;
}

static void onAlarm(int sig) {
    (void)sig;
    tsKillAll();
    removeDir(etcd.dir);
    char msg[256];
    int n = snprintf(msg, sizeof(msg), "[err] %s (watchdog: stuck for %d s)\n%d passed, %d failed\n",
                     test_cur_name ? test_cur_name : "(between tests)", WATCHDOG_S, test_passed, test_failed + 1);
    if (n > 0 && write(1, msg, (size_t)n) < 0) {}
    _exit(1);
}

static size_t discardBody(char *p, size_t size, size_t n, void *priv) {
    sds *s = priv;
    *s = sdscatlen(*s, p, size * n);
    return size * n;
}

/* A blocking POST for the test's own use (health checks, compaction). */
static long httpPost(const char *path, const char *body, sds *reply) {
    CURL *c = curl_easy_init();
    char url[128];
    long status = 0;
    snprintf(url, sizeof(url), "%s%s", etcd.url, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discardBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, reply);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    return status;
}

/* Starts etcd on etcd.port/etcd.peer with etcd.data; 0 once it is healthy. */
static int etcdStart(void) {
    char curls[64], purls[64], cluster[96];
    snprintf(curls, sizeof(curls), "http://127.0.0.1:%d", etcd.port);
    snprintf(purls, sizeof(purls), "http://127.0.0.1:%d", etcd.peer);
    snprintf(cluster, sizeof(cluster), "default=%s", purls);
    snprintf(etcd.url, sizeof(etcd.url), "%s", curls);
    pid_t self = getpid(), pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        tsDieWithParent(self);
        int fd = open(etcd.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        closefrom(3); /* the client's sockets must not live on in etcd */
        execl(ETCD_BIN, "etcd", "--name", "default", "--data-dir", etcd.data, "--listen-client-urls", curls,
              "--advertise-client-urls", curls, "--listen-peer-urls", purls, "--initial-advertise-peer-urls", purls,
              "--initial-cluster", cluster, (char *)NULL);
        _exit(127);
    }
    etcd.pid = pid;
    tsTrack(pid);
    for (long long deadline = tsNowMs() + 20000; tsNowMs() < deadline; tsSleepMs(20)) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            tsUntrack(pid);
            etcd.pid = 0;
            return -1;
        }
        sds reply = sdsempty();
        int healthy = httpPost("/health", NULL, &reply) == 200 && strstr(reply, "true");
        sdsfree(reply);
        if (healthy) return 0;
    }
    etcdKill();
    return -1;
}

/* First start: fresh ports (another process may take one meanwhile: retry). */
static int etcdSetup(void) {
    if (testMkdtemp(etcd.dir, sizeof(etcd.dir), "etcdtest") != 0) return -1;
    snprintf(etcd.data, sizeof(etcd.data), "%s/data", etcd.dir);
    snprintf(etcd.log, sizeof(etcd.log), "%s/etcd.log", etcd.dir);
    for (int attempt = 0; attempt < 3; attempt++) {
        etcd.port = tsFreePort();
        do etcd.peer = tsFreePort();
        while (etcd.peer == etcd.port);
        if (etcdStart() == 0) return 0;
    }
    return -1;
}

/* ---- the loop and what the callbacks saw ------------------------------------- */

static long long ticks, last_tick_us, max_gap_us;

static int tickProc(aeEventLoop *l, long long id, void *priv) {
    (void)l, (void)id, (void)priv;
    long long now = aeMonotonicUs();
    if (last_tick_us && now - last_tick_us > max_gap_us) max_gap_us = now - last_tick_us;
    last_tick_us = now;
    ticks++;
    return 5;
}

/* Runs the loop until cond holds or ms pass. */
#define WAIT_FOR(cond, ms) \
    do { \
        long long _dl = tsNowMs() + (ms); \
        while (!(cond) && tsNowMs() < _dl) aeProcessEvents(el, AE_ALL_EVENTS); \
    } while (0)

static void runFor(long long ms) { WAIT_FOR(0, ms); }

#define MAXKV 8
typedef struct res {
    int done, ok, http_status, succeeded, nkvs, unanswered;
    sds err;
    long long revision, deleted, lease_id, ttl, at_ms;
    etcdKV kvs[MAXKV];
} res;

static void resClear(res *x) {
    sdsfree(x->err);
    for (int i = 0; i < x->nkvs && i < MAXKV; i++) {
        sdsfree(x->kvs[i].key);
        sdsfree(x->kvs[i].value);
    }
    memset(x, 0, sizeof(*x));
}

/* The result is valid only during the callback: copy it. */
static void resCb(const etcdResult *r, void *priv) {
    res *x = priv;
    resClear(x);
    x->done = 1;
    x->at_ms = tsNowMs();
    x->ok = r->ok;
    x->http_status = r->http_status;
    x->unanswered = r->unanswered;
    x->err = r->err ? sdsnew(r->err) : NULL;
    x->revision = r->revision;
    x->succeeded = r->succeeded;
    x->deleted = r->deleted;
    x->lease_id = r->lease_id;
    x->ttl = r->ttl;
    x->nkvs = r->nkvs;
    for (int i = 0; i < r->nkvs && i < MAXKV; i++) {
        x->kvs[i] = r->kvs[i];
        x->kvs[i].key = sdsdup(r->kvs[i].key);
        x->kvs[i].value = sdsdup(r->kvs[i].value);
    }
}

/* Waits for one request; prints its error if it failed. */
static int waitRes(res *x, long long ms) {
    WAIT_FOR(x->done, ms);
    if (x->done && !x->ok) fprintf(stderr, "  (request failed: http %d, %s)\n", x->http_status, x->err);
    return x->done;
}

static int eqBytes(sds s, const char *p, size_t len) { return s && sdslen(s) == len && !memcmp(s, p, len); }

/* The watch log: one row per status, or per event. */
typedef struct wrow {
    int status, msg, deleted;
    sds key, value;
    long long mod_rev, rev;
} wrow;
static wrow wlog[256];
static int nwlog, nwmsg;

static void watchCb(int status, const etcdEvent *evs, int n, long long rev, void *priv) {
    (void)priv;
    nwmsg++;
    if (status != ETCD_WATCH_EVENTS && nwlog < 256) wlog[nwlog++] = (wrow){status, nwmsg, 0, NULL, NULL, 0, rev};
    for (int i = 0; status == ETCD_WATCH_EVENTS && i < n && nwlog < 256; i++)
        wlog[nwlog++] = (wrow){status,           nwmsg, evs[i].deleted, sdsdup(evs[i].kv.key), sdsdup(evs[i].kv.value),
                               evs[i].kv.mod_rev, rev};
}

static int countStatus(int status, int from) {
    int n = 0;
    for (int i = from; i < nwlog; i++) n += wlog[i].status == status;
    return n;
}

/* The index of the first event row for key at or after from, or -1. */
static int findEvent(const char *key, int deleted, int from) {
    for (int i = from; i < nwlog; i++)
        if (wlog[i].status == ETCD_WATCH_EVENTS && wlog[i].deleted == deleted && !strcmp(wlog[i].key, key)) return i;
    return -1;
}

/* The same with a given mod revision: a put retried after a lost reply
 * (etcd slow to elect itself after a restart) may show up twice. */
static int findEventAt(const char *key, long long mod_rev, int from) {
    for (int i = from; i < nwlog; i++)
        if (wlog[i].status == ETCD_WATCH_EVENTS && !strcmp(wlog[i].key, key) && wlog[i].mod_rev == mod_rev) return i;
    return -1;
}

static void wlogClear(void) {
    for (int i = 0; i < nwlog; i++) {
        sdsfree(wlog[i].key);
        sdsfree(wlog[i].value);
    }
    nwlog = 0;
}

static etcdClient *newClient(const char *ep1, const char *ep2) {
    sds eps[2] = {sdsnew(ep1), ep2 ? sdsnew(ep2) : NULL};
    char err[256];
    etcdClient *ec = etcdCreate(el, eps, ep2 ? 2 : 1, err, sizeof(err));
    if (!ec) fprintf(stderr, "  etcdCreate: %s\n", err);
    if (ec) etcdSetRequestTimeout(ec, T_WAIT);
    sdsfree(eps[0]);
    sdsfree(eps[1]);
    return ec;
}

static void put(etcdClient *ec, const char *k, const char *v, res *x) {
    resClear(x);
    etcdPut(ec, k, strlen(k), v, strlen(v), 0, resCb, x);
    waitRes(x, T_WAIT);
}

/* ---- a fake etcd for what the real one will not say --------------------------- */

static struct {
    int lfd, port;
    pthread_mutex_t lock;
    sds parts[8];             /* written in turn, 30 ms apart; none: close at once */
    int nparts;
    int hold;                 /* then keep the connection until the client closes it */
    size_t filler;            /* after the parts, this many 'a' bytes ... */
    sds after;                /* ... then this (NULL: nothing) */
    volatile int stop;
    pthread_t th;
} fake = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* What the fake answers from now on (a NULL-terminated list, copied). */
static void fakeSet(const char *const *parts, int hold) {
    pthread_mutex_lock(&fake.lock);
    for (int i = 0; i < fake.nparts; i++) sdsfree(fake.parts[i]);
    for (fake.nparts = 0; parts[fake.nparts] && fake.nparts < 8; fake.nparts++)
        fake.parts[fake.nparts] = sdsnew(parts[fake.nparts]);
    fake.hold = hold;
    fake.filler = 0;
    sdsfree(fake.after);
    fake.after = NULL;
    pthread_mutex_unlock(&fake.lock);
}

/* A body too large to hold in the fake: filler bytes streamed after the
 * parts set by fakeSet, then after. Call after fakeSet. */
static void fakeSetFiller(size_t filler, const char *after) {
    pthread_mutex_lock(&fake.lock);
    fake.filler = filler;
    fake.after = after ? sdsnew(after) : NULL;
    pthread_mutex_unlock(&fake.lock);
}

static void fakeServe(int fd) {
    char buf[8192];
    size_t got = 0;
    char *hdr_end = NULL;
    while (got < sizeof(buf) - 1) { /* the request: headers plus Content-Length bytes */
        ssize_t n = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (n <= 0) return;
        got += (size_t)n;
        buf[got] = '\0';
        if (!hdr_end && (hdr_end = strstr(buf, "\r\n\r\n")) == NULL) continue;
        char *cl = strcasestr(buf, "Content-Length:");
        if (got >= (size_t)(hdr_end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0)) break;
    }
    pthread_mutex_lock(&fake.lock);
    sds parts[8];
    int n = fake.nparts, hold = fake.hold;
    size_t filler = fake.filler;
    sds after = fake.after ? sdsdup(fake.after) : NULL;
    for (int i = 0; i < n; i++) parts[i] = sdsdup(fake.parts[i]);
    pthread_mutex_unlock(&fake.lock);
    for (int i = 0; i < n; i++) {
        if (tsWriteAll(fd, parts[i], sdslen(parts[i])) == -1) hold = 0;
        sdsfree(parts[i]);
        if (hold || i + 1 < n) tsSleepMs(30);
    }
    int gone = 0; /* the client hung up: stop writing */
    if (filler) {
        char block[65536];
        memset(block, 'a', sizeof(block));
        for (size_t left = filler; left > 0 && !gone; left -= left < sizeof(block) ? left : sizeof(block))
            gone = tsWriteAll(fd, block, left < sizeof(block) ? left : sizeof(block)) == -1;
    }
    if (after && !gone) gone = tsWriteAll(fd, after, sdslen(after)) == -1;
    if (gone) hold = 0;
    sdsfree(after);
    while (hold && !fake.stop) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 50) == 1 && read(fd, buf, sizeof(buf)) <= 0) break;
    }
}

static void *fakeMain(void *arg) {
    (void)arg;
    while (!fake.stop) {
        struct pollfd pfd = {fake.lfd, POLLIN, 0};
        if (poll(&pfd, 1, 50) != 1) continue;
        int fd = accept(fake.lfd, NULL, NULL);
        if (fd < 0) continue;
        fakeServe(fd);
        close(fd);
    }
    return NULL;
}

static int fakeStart(void) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    fake.lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (fake.lfd < 0 || bind(fake.lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fake.lfd, 16) ||
        getsockname(fake.lfd, (struct sockaddr *)&sa, &len))
        return -1;
    fake.port = ntohs(sa.sin_port);
    return pthread_create(&fake.th, NULL, fakeMain, NULL) ? -1 : 0;
}

static void fakeStop(void) {
    fake.stop = 1;
    pthread_join(fake.th, NULL);
    close(fake.lfd);
    fakeSet((const char *const[]){NULL}, 0);
}

/* A canned HTTP reply; the same buffer is reused, so one at a time. */
static const char *fakeReply(int status, const char *body) {
    static char buf[2048];
    snprintf(buf, sizeof(buf), "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n%s", status, strlen(body), body);
    return buf;
}

/* ---- the tests ---------------------------------------------------------------- */

static void testKV(etcdClient *ec) {
    res a = {0}, b = {0}, c = {0};
    TEST("etcd: put, range and delete round-trip binary keys and values") {
        static const char key[] = "bin/\0\xff\x80k";
        char val[256];
        for (int i = 0; i < 256; i++) val[i] = (char)(255 - i); /* every byte, 0 and non-UTF-8 included */
        etcdPut(ec, key, sizeof(key) - 1, val, sizeof(val), 0, resCb, &a);
        CHECK(waitRes(&a, T_WAIT) && a.ok && a.revision > 0);
        etcdRange(ec, key, sizeof(key) - 1, NULL, 0, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok);
        CHECK_EQ(b.nkvs, 1);
        CHECK(b.nkvs == 1 && eqBytes(b.kvs[0].key, key, sizeof(key) - 1) && eqBytes(b.kvs[0].value, val, sizeof(val)));
        CHECK(b.nkvs == 1 && b.kvs[0].mod_rev == a.revision && b.kvs[0].create_rev == a.revision);
        CHECK(b.nkvs == 1 && b.kvs[0].version == 1 && b.kvs[0].lease == 0);
        etcdDelete(ec, key, sizeof(key) - 1, NULL, 0, resCb, &c);
        CHECK(waitRes(&c, T_WAIT) && c.ok && c.deleted == 1 && c.revision == a.revision + 1);
        resClear(&b);
        etcdRange(ec, key, sizeof(key) - 1, NULL, 0, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && b.nkvs == 0 && b.revision == c.revision);
    }
    TEST("etcd: an empty value, and a delete of nothing") {
        put(ec, "empty", "", &a);
        CHECK(a.ok);
        resClear(&b);
        etcdRange(ec, "empty", 5, NULL, 0, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && b.nkvs == 1 && b.kvs[0].value && sdslen(b.kvs[0].value) == 0);
        resClear(&c);
        etcdDelete(ec, "nothing", 7, NULL, 0, resCb, &c);
        CHECK(waitRes(&c, T_WAIT) && c.ok && c.deleted == 0);
    }
    TEST("etcd: prefix range with etcdPrefixEnd") {
        sds e1 = etcdPrefixEnd("ab", 2), e2 = etcdPrefixEnd("a\xff\xff", 3), e3 = etcdPrefixEnd("\xff", 1);
        CHECK(eqBytes(e1, "ac", 2) && eqBytes(e2, "b", 1) && eqBytes(e3, "\0", 1));
        sdsfree(e1), sdsfree(e2), sdsfree(e3);
        const char *keys[] = {"pfw", "pfx/b", "pfx/a", "pfx0", "pfx/c", "pfx"};
        for (int i = 0; i < 6; i++) put(ec, keys[i], keys[i], &a);
        sds end = etcdPrefixEnd("pfx/", 4);
        resClear(&b);
        etcdRange(ec, "pfx/", 4, end, sdslen(end), resCb, &b);
        sdsfree(end);
        CHECK(waitRes(&b, T_WAIT) && b.ok);
        CHECK_EQ(b.nkvs, 3);
        CHECK(b.nkvs == 3 && !strcmp(b.kvs[0].key, "pfx/a") && !strcmp(b.kvs[1].key, "pfx/b") &&
              !strcmp(b.kvs[2].key, "pfx/c") && !strcmp(b.kvs[2].value, "pfx/c"));
        end = etcdPrefixEnd("pfx/", 4);
        resClear(&c);
        etcdDelete(ec, "pfx/", 4, end, sdslen(end), resCb, &c);
        sdsfree(end);
        CHECK(waitRes(&c, T_WAIT) && c.ok && c.deleted == 3);
    }
    TEST("etcd: txn compare-and-swap on mod revision, value and not-exists") {
        put(ec, "cas/k", "v1", &a);
        long long rev1 = a.revision;
        etcdTxn *t = etcdTxnCreate();
        etcdTxnCompareModRev(t, "cas/k", 5, rev1);
        etcdTxnPut(t, 1, "cas/k", 5, "v2", 2, 0);
        etcdTxnRange(t, 1, "cas/k", 5, NULL, 0);
        etcdTxnRange(t, 0, "cas/k", 5, NULL, 0);
        resClear(&b);
        etcdTxnSubmit(ec, t, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && b.succeeded && b.revision == rev1 + 1);
        CHECK(b.nkvs == 1 && !strcmp(b.kvs[0].value, "v2") && b.kvs[0].mod_rev == rev1 + 1);
        /* The same compare again is stale: the failure branch runs. */
        t = etcdTxnCreate();
        etcdTxnCompareModRev(t, "cas/k", 5, rev1);
        etcdTxnPut(t, 1, "cas/k", 5, "v3", 2, 0);
        etcdTxnRange(t, 0, "cas/k", 5, NULL, 0);
        etcdTxnRange(t, 0, "cas/none", 8, NULL, 0);
        etcdTxnRange(t, 0, "cas/k", 5, NULL, 0);
        resClear(&b);
        etcdTxnSubmit(ec, t, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && !b.succeeded && b.revision == rev1 + 1);
        CHECK_EQ(b.nkvs, 2); /* the two hits, in order; the miss adds nothing */
        CHECK(b.nkvs == 2 && !strcmp(b.kvs[0].value, "v2") && !strcmp(b.kvs[1].value, "v2"));
        /* rev 0: "the key does not exist", once. */
        for (int round = 0; round < 2; round++) {
            t = etcdTxnCreate();
            etcdTxnCompareModRev(t, "cas/new", 7, 0);
            etcdTxnPut(t, 1, "cas/new", 7, "mine", 4, 0);
            resClear(&b);
            etcdTxnSubmit(ec, t, resCb, &b);
            CHECK(waitRes(&b, T_WAIT) && b.ok && b.succeeded == (round == 0));
        }
        /* Value compares, true and false. */
        for (int round = 0; round < 2; round++) {
            t = etcdTxnCreate();
            etcdTxnCompareValue(t, "cas/k", 5, round ? "v1" : "v2", 2);
            resClear(&b);
            etcdTxnSubmit(ec, t, resCb, &b);
            CHECK(waitRes(&b, T_WAIT) && b.ok && b.succeeded == (round == 0));
        }
    }
    TEST("etcd: lease grant, keepalive, put with a lease, revoke") {
        resClear(&a);
        etcdLeaseGrant(ec, 30, resCb, &a);
        CHECK(waitRes(&a, T_WAIT) && a.ok && a.lease_id != 0 && a.ttl == 30);
        long long id = a.lease_id;
        resClear(&b);
        etcdLeaseKeepalive(ec, id, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && b.lease_id == id && b.ttl == 30);
        resClear(&b);
        etcdPut(ec, "lease/k", 7, "v", 1, id, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok);
        resClear(&b);
        etcdRange(ec, "lease/k", 7, NULL, 0, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && b.nkvs == 1 && b.kvs[0].lease == id);
        resClear(&b);
        etcdLeaseRevoke(ec, id, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok);
        resClear(&b);
        etcdRange(ec, "lease/k", 7, NULL, 0, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && b.nkvs == 0);
        resClear(&b);
        etcdLeaseKeepalive(ec, id, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && b.ttl == 0);
        /* An HTTP error is etcd's answer: reported at once, not retried. */
        resClear(&b);
        long long t0 = tsNowMs();
        etcdPut(ec, "lease/k", 7, "v", 1, id, resCb, &b);
        WAIT_FOR(b.done, T_WAIT);
        CHECK(b.done && !b.ok && b.http_status == 404 && b.err && strstr(b.err, "lease not found"));
        CHECK(b.at_ms - t0 < 8000); /* retrying would run to the timeout */
    }
    TEST("etcd: requests over 1.5 MiB are refused locally, ones just under go through") {
        size_t big = 1536 * 1024 + 1;
        char *v = calloc(1, big);
        resClear(&a);
        etcdPut(ec, "big", 3, v, big, 0, resCb, &a);
        WAIT_FOR(a.done, T_WAIT);
        CHECK(a.done && !a.ok && a.http_status == 0 && a.err && strstr(a.err, "too large"));
        etcdTxn *t = etcdTxnCreate();
        etcdTxnPut(t, 1, "big1", 4, v, big / 2, 0);
        etcdTxnPut(t, 0, "big2", 4, v, big / 2, 0);
        resClear(&a);
        etcdTxnSubmit(ec, t, resCb, &a);
        WAIT_FOR(a.done, T_WAIT);
        CHECK(a.done && !a.ok && a.http_status == 0 && a.err && strstr(a.err, "too large"));
        resClear(&a);
        etcdPut(ec, "big", 3, v, 1024 * 1024, 0, resCb, &a);
        CHECK(waitRes(&a, T_WAIT) && a.ok);
        resClear(&b);
        etcdDelete(ec, "big", 3, NULL, 0, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && b.deleted == 1);
        free(v);
    }
    resClear(&a), resClear(&b), resClear(&c);
}

/* The watch, then an outage: kill etcd, see the loop stay free, restart it. */
static void testWatchAndOutage(etcdClient *ec) {
    res a = {0}, b = {0}, c = {0}, d = {0};
    long long ra = 0, rb = 0, rt = 0, rd = 0;
    TEST("etcd: a prefix watch sees PUT and DELETE in order, a txn's ops in one message") {
        CHECK(etcdWatchPrefix(ec, "w/", 2, 0, watchCb, NULL) == 0);
        CHECK(etcdWatchPrefix(ec, "v/", 2, 0, watchCb, NULL) == -1); /* one per client */
        WAIT_FOR(countStatus(ETCD_WATCH_UP, 0) == 1, T_WAIT);
        CHECK_EQ(countStatus(ETCD_WATCH_UP, 0), 1);
        put(ec, "x/outside", "1", &a);
        put(ec, "w/a", "A", &a), ra = a.revision;
        put(ec, "w0", "outside too", &a);
        put(ec, "w/b", "B", &a), rb = a.revision;
        etcdTxn *t = etcdTxnCreate();
        etcdTxnPut(t, 1, "w/c", 3, "C", 1, 0);
        etcdTxnDelete(t, 1, "w/a", 3);
        etcdTxnSubmit(ec, t, resCb, &b);
        CHECK(waitRes(&b, T_WAIT) && b.ok && b.succeeded);
        rt = b.revision;
        etcdDelete(ec, "w/b", 3, NULL, 0, resCb, &c);
        CHECK(waitRes(&c, T_WAIT) && c.ok && c.deleted == 1);
        rd = c.revision;
        WAIT_FOR(nwlog >= 6, T_WAIT);
        CHECK_EQ(nwlog, 6);
        if (nwlog == 6) {
            static const char *keys[] = {NULL, "w/a", "w/b", "w/c", "w/a", "w/b"};
            int deleted[] = {0, 0, 0, 0, 1, 1};
            long long revs[] = {0, ra, rb, rt, rt, rd};
            for (int i = 1; i < 6; i++) {
                CHECK(wlog[i].status == ETCD_WATCH_EVENTS && !strcmp(wlog[i].key, keys[i]));
                CHECK_EQ(wlog[i].deleted, deleted[i]);
                CHECK_EQ(wlog[i].mod_rev, revs[i]);
            }
            CHECK(!strcmp(wlog[1].value, "A") && !strcmp(wlog[3].value, "C") && sdslen(wlog[4].value) == 0);
            CHECK(wlog[3].msg == wlog[4].msg && wlog[2].msg != wlog[3].msg && wlog[3].rev == rt);
        }
    }
    int base = nwlog;
    TEST("etcd: while etcd is down the watch says DOWN once and a request fails after its timeout") {
        etcdKill();
        WAIT_FOR(countStatus(ETCD_WATCH_DOWN, base) >= 1, T_WAIT);
        CHECK_EQ(countStatus(ETCD_WATCH_DOWN, base), 1);
        etcdSetRequestTimeout(ec, 700);
        resClear(&a);
        long long t0 = tsNowMs(), ticks0 = ticks;
        max_gap_us = 0, last_tick_us = 0;
        etcdRange(ec, "w/a", 3, NULL, 0, resCb, &a);
        long long queued_in = tsNowMs() - t0;
        WAIT_FOR(a.done, T_WAIT);
        CHECK(a.done && !a.ok && a.http_status == 0);
        CHECK(a.err && strstr(a.err, "etcd unreachable") && strstr(a.err, etcd.url));
        if (a.err) printf("    (the error: %s)\n", a.err);
        CHECK(a.at_ms - t0 >= 650 && a.at_ms - t0 < 6000); /* its 700 ms, not the client's 15 s */
        /* The loop was free: queueing took no time and the 5 ms timer went
         * on meanwhile. Loose bounds, as the machine may be loaded: a client
         * that blocked would take some 700 ms here and let no tick through. */
        CHECK(queued_in < 300);
        CHECK(ticks - ticks0 >= 3);
        printf("    (%lld ticks of 5 ms while it failed, the largest gap %lld ms)\n", ticks - ticks0,
               max_gap_us / 1000);
        runFor(1500); /* backoff retries: still one DOWN */
        CHECK_EQ(countStatus(ETCD_WATCH_DOWN, base), 1);
        CHECK_EQ(countStatus(ETCD_WATCH_UP, base), 0);
    }
    TEST("etcd: a request queued while etcd is down succeeds when it comes back; the watch resumes") {
        etcdSetRequestTimeout(ec, T_WAIT);
        resClear(&d);
        etcdPut(ec, "w/during", 8, "D", 1, 0, resCb, &d);
        runFor(300);
        CHECK(!d.done);
        CHECK(etcdStart() == 0);
        /* Written the moment etcd is back, most likely before the watch
         * has reconnected: it must resume from where it was, not "now". */
        sds reply = sdsempty();
        CHECK(httpPost("/v3/kv/put", "{\"key\":\"dy9nYXA=\",\"value\":\"Zw==\"}", &reply) == 200);
        sdsfree(reply);
        CHECK(waitRes(&d, T_WAIT) && d.ok);
        WAIT_FOR(findEvent("w/gap", 0, base) >= 0, 8000);
        CHECK(findEvent("w/gap", 0, base) >= 0);
        WAIT_FOR(findEventAt("w/during", d.revision, base) >= 0, 8000);
        CHECK(findEventAt("w/during", d.revision, base) >= 0);
        CHECK_EQ(countStatus(ETCD_WATCH_UP, base), 1);
        CHECK_EQ(countStatus(ETCD_WATCH_DOWN, base), 1);
        put(ec, "w/after", "E", &a);
        WAIT_FOR(findEvent("w/after", 0, base) >= 0, T_WAIT);
        int i = findEvent("w/after", 0, base);
        CHECK(i >= 0 && wlog[i].mod_rev == a.revision && !strcmp(wlog[i].value, "E"));
        CHECK(findEvent("w/c", 0, base) == -1); /* nothing from before the outage again */
        etcdSetRequestTimeout(ec, T_WAIT);
    }
    base = nwlog;
    TEST("etcd: a watch from a compacted revision says COMPACTED, etcdWatchRestart resumes") {
        sds reply = sdsempty(), body = sdscatprintf(sdsempty(), "{\"revision\":\"%lld\"}", a.revision);
        CHECK(httpPost("/v3/kv/compaction", body, &reply) == 200);
        sdsfree(reply), sdsfree(body);
        etcdWatchRestart(ec, 2);
        WAIT_FOR(countStatus(ETCD_WATCH_COMPACTED, base) == 1, T_WAIT);
        CHECK_EQ(countStatus(ETCD_WATCH_COMPACTED, base), 1);
        int i = base;
        while (i < nwlog && wlog[i].status != ETCD_WATCH_COMPACTED) i++;
        CHECK(i < nwlog && wlog[i].rev == a.revision);
        put(ec, "w/ignored", "x", &b); /* paused: no event until the restart */
        runFor(200);
        CHECK(findEvent("w/ignored", 0, base) == -1);
        etcdWatchRestart(ec, b.revision + 1);
        put(ec, "w/resumed", "y", &c);
        WAIT_FOR(findEvent("w/resumed", 0, base) >= 0, T_WAIT);
        CHECK(findEvent("w/resumed", 0, base) >= 0 && findEvent("w/ignored", 0, base) == -1);
        CHECK_EQ(countStatus(ETCD_WATCH_DOWN, base), 0);
    }
    resClear(&a), resClear(&b), resClear(&c), resClear(&d);
}

static void testEndpointsAndRelease(void) {
    res a = {0};
    char dead[64];
    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", tsFreePort());
    TEST("etcd: a dead first endpoint is passed over") {
        etcdClient *ec = newClient(dead, etcd.url);
        CHECK(ec != NULL);
        if (ec) {
            long long t0 = tsNowMs();
            put(ec, "ep/k", "v", &a);
            CHECK(a.ok && a.at_ms - t0 < 8000); /* not stuck on the dead one until the timeout */
            etcdRelease(ec);
        }
        char err[128] = "";
        sds bad = sdsnew("127.0.0.1:2379");
        CHECK(etcdCreate(el, &bad, 1, err, sizeof(err)) == NULL && strstr(err, "http://"));
        CHECK(etcdCreate(el, &bad, 0, err, sizeof(err)) == NULL);
        sdsfree(bad);
    }
    TEST("etcd: etcdRelease returns promptly with a watch open and with a request retrying") {
        etcdClient *ec = newClient(etcd.url, NULL);
        CHECK(ec && etcdWatchPrefix(ec, "r/", 2, 0, watchCb, NULL) == 0);
        int base = nwlog;
        WAIT_FOR(countStatus(ETCD_WATCH_UP, base) == 1, T_WAIT);
        CHECK_EQ(countStatus(ETCD_WATCH_UP, base), 1);
        long long t0 = tsNowMs();
        etcdRelease(ec);
        long long took = tsNowMs() - t0;
        CHECK(took < 1000); /* woken (about 1 ms), not left to notice by a time-out */
        ec = newClient(dead, NULL);
        CHECK(ec && etcdWatchPrefix(ec, "r/", 2, 0, watchCb, NULL) == 0);
        resClear(&a);
        etcdRange(ec, "r", 1, NULL, 0, resCb, &a);
        runFor(500); /* into its backoff */
        t0 = tsNowMs();
        etcdRelease(ec);
        CHECK(tsNowMs() - t0 < 1000);
        printf("    (etcdRelease took %lld ms with a watch open, %lld ms with a request retrying)\n", took,
               tsNowMs() - t0);
        runFor(100);
        CHECK(!a.done); /* callbacks of queued requests are not run */
    }
    resClear(&a);
}

/* Releasing from inside a callback must wait until the callback is done. */
static void releaseCb(const etcdResult *r, void *priv) {
    (void)r;
    etcdRelease(*(etcdClient **)priv);
    *(etcdClient **)priv = NULL;
}

static void testFake(void) {
    char url[64];
    res a = {0};
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", fake.port);
    etcdClient *ec = newClient(url, NULL);
    if (!ec) return;
    struct { const char *body; int ok; const char *err; } cases[] = {
        {"{\"header\":{\"revision\":12},\"kvs\":[{\"key\":\"YQ==\",\"mod_revision\":\"7\"}]}", 1, NULL},
        {"{\"header\":{\"revision\":\"12x\"}}", 0, "malformed reply from etcd"},
        {"{\"header\":{\"revision\":\" 12\"}}", 0, "malformed reply from etcd"},
        {"{\"header\":{\"revision\":\"99999999999999999999\"}}", 0, "malformed reply from etcd"},
        {"{\"kvs\":[{\"key\":\"YQ=\"}]}", 0, "malformed reply from etcd"},
        {"{\"kvs\":[{\"key\":\"Y=Q=\"}]}", 0, "malformed reply from etcd"},
        {"{\"kvs\":[{\"key\":\"YQ==\",\"value\":\"!!!!\"}]}", 0, "malformed reply from etcd"},
        {"{\"kvs\":{}}", 0, "malformed reply from etcd"},
        {"not json", 0, "malformed reply from etcd"},
    };
    TEST("etcd: integers must parse whole, base64 must be valid, else a malformed reply") {
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            fakeSet((const char *const[]){fakeReply(200, cases[i].body), NULL}, 0);
            resClear(&a);
            etcdRange(ec, "a", 1, NULL, 0, resCb, &a);
            WAIT_FOR(a.done, T_WAIT);
            CHECK(a.done && a.ok == cases[i].ok);
            if (cases[i].err) CHECK(a.err && strstr(a.err, cases[i].err));
            if (a.done && a.ok != cases[i].ok) fprintf(stderr, "  case %zu: %s\n", i, a.err ? a.err : "ok");
        }
        fakeSet((const char *const[]){fakeReply(200, cases[0].body), NULL}, 0);
        resClear(&a);
        etcdRange(ec, "a", 1, NULL, 0, resCb, &a);
        CHECK(waitRes(&a, T_WAIT) && a.ok && a.revision == 12 && a.nkvs == 1 && a.kvs[0].mod_rev == 7);
    }
    TEST("etcd: an HTTP error without a JSON body, and an empty reply retried until the timeout") {
        fakeSet((const char *const[]){fakeReply(503, "busy"), NULL}, 0);
        resClear(&a);
        etcdRange(ec, "a", 1, NULL, 0, resCb, &a);
        WAIT_FOR(a.done, T_WAIT);
        CHECK(a.done && !a.ok && a.http_status == 503 && a.err && strstr(a.err, "HTTP 503"));
        CHECK(a.unanswered == 0);
        fakeSet((const char *const[]){NULL}, 0);
        etcdSetRequestTimeout(ec, 400);
        resClear(&a);
        long long t0 = tsNowMs();
        etcdRange(ec, "a", 1, NULL, 0, resCb, &a);
        WAIT_FOR(a.done, T_WAIT);
        CHECK(a.done && !a.ok && a.http_status == 0 && a.err && strstr(a.err, "etcd unreachable"));
        CHECK(a.at_ms - t0 >= 350);
        /* The request went out and no answer came: a write may have been
         * applied (cluster_sync.c says so instead of "nothing changed"). An
         * HTTP error is an answer. */
        CHECK(a.unanswered == 1);
        /* A refused connection sent nothing: that failure is sure. The
         * port is held by a socket bound and never listening, so nothing
         * else can take it meanwhile. */
        int held = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t salen = sizeof(sa);
        CHECK(held >= 0 && bind(held, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
              getsockname(held, (struct sockaddr *)&sa, &salen) == 0);
        char refused[64];
        snprintf(refused, sizeof(refused), "http://127.0.0.1:%d", ntohs(sa.sin_port));
        etcdClient *rc = newClient(refused, NULL);
        if (rc) {
            etcdSetRequestTimeout(rc, 400);
            resClear(&a);
            etcdRange(rc, "a", 1, NULL, 0, resCb, &a);
            WAIT_FOR(a.done, T_WAIT);
            CHECK(a.done && !a.ok && a.http_status == 0 && a.unanswered == 0);
            etcdRelease(rc);
        }
        if (held >= 0) close(held);
    }
    TEST("etcd: a reply over the reply limit fails its request at once, and the next one works") {
        /* A valid reply but for its size: before the limit it was read
         * whole into memory (an endless one took all of it). */
        static char head[256];
        const char *pre = "{\"header\":{\"revision\":\"3\"},\"pad\":\"", *post = "\"}";
        size_t filler = 4u << 20;
        snprintf(head, sizeof(head), "HTTP/1.1 200 X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n%s", strlen(pre) + filler + strlen(post), pre);
        etcdSetReplyLimit(ec, 1u << 20);
        fakeSet((const char *const[]){head, NULL}, 0);
        fakeSetFiller(filler, post);
        resClear(&a);
        etcdRange(ec, "a", 1, NULL, 0, resCb, &a);
        WAIT_FOR(a.done, T_WAIT);
        CHECK(a.done && !a.ok && a.err && strstr(a.err, "reply over 1048576 bytes"));
        if (a.done && a.ok) fprintf(stderr, "  a 4 MiB reply was accepted under a 1 MiB limit\n");
        fakeSet((const char *const[]){fakeReply(200, cases[0].body), NULL}, 0);
        resClear(&a);
        etcdRange(ec, "a", 1, NULL, 0, resCb, &a);
        CHECK(waitRes(&a, T_WAIT) && a.ok && a.revision == 12);
    }
    TEST("etcd: etcdRelease from inside a callback") {
        fakeSet((const char *const[]){fakeReply(200, "{}"), NULL}, 0);
        etcdClient *self = ec;
        etcdSetRequestTimeout(ec, 3000);
        resClear(&a);
        etcdRange(ec, "a", 1, NULL, 0, releaseCb, &self);
        etcdRange(ec, "b", 1, NULL, 0, resCb, &a); /* queued behind: dropped */
        WAIT_FOR(self == NULL, T_WAIT);
        CHECK(self == NULL);
        runFor(100);
        CHECK(!a.done);
    }
    TEST("etcd: a watch stream cut anywhere by the chunking is put back together") {
        /* Chunk boundaries inside a JSON object and after half a line. */
        static const char *const lines[] = {
            "{\"result\":{\"header\":{\"revision\":\"5\"},\"crea",
            "ted\":true}}\n",
            "{\"result\":{\"header\":{\"revision\":\"6\"},\"events\":[{\"kv\":{\"key\":\"dy9h\","
            "\"mod_revision\":\"6\",\"value\":\"MQ==\"}}]}}\n{\"result\":",
            "{\"header\":{\"revision\":\"7\"},\"events\":[{\"type\":\"DELETE\",\"kv\":{\"key\":\"dy9h\","
            "\"mod_revision\":\"7\"}}]}}\n"};
        sds chunks[5];
        const char *parts[6];
        chunks[0] = sdsnew("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
        for (int i = 0; i < 4; i++)
            chunks[i + 1] = sdscatprintf(sdsempty(), "%zx\r\n%s\r\n", strlen(lines[i]), lines[i]);
        for (int i = 0; i < 5; i++) parts[i] = chunks[i];
        parts[5] = NULL;
        fakeSet(parts, 1);
        int base = nwlog;
        ec = newClient(url, NULL);
        CHECK(ec && etcdWatchPrefix(ec, "w/", 2, 0, watchCb, NULL) == 0);
        WAIT_FOR(nwlog - base >= 3, T_WAIT);
        CHECK_EQ(nwlog - base, 3);
        if (nwlog - base == 3) {
            CHECK(wlog[base].status == ETCD_WATCH_UP && wlog[base].rev == 5);
            CHECK(wlog[base + 1].status == ETCD_WATCH_EVENTS && !wlog[base + 1].deleted &&
                  !strcmp(wlog[base + 1].key, "w/a") && !strcmp(wlog[base + 1].value, "1") &&
                  wlog[base + 1].mod_rev == 6);
            CHECK(wlog[base + 2].deleted && !strcmp(wlog[base + 2].key, "w/a") && wlog[base + 2].mod_rev == 7);
        }
        etcdRelease(ec); /* closes the stream, which ends the fake's hold */
        for (int i = 0; i < 5; i++) sdsfree(chunks[i]);
    }
    TEST("etcd: a watch that breaks right after it is created is reopened with growing pauses") {
        /* "created", then a line that is not JSON, then the stream ends:
         * the backoff used to start again from 50 ms after every "created",
         * so the watch was reopened (UP and DOWN reported) ~15 times a
         * second. With the pauses growing (50, 100, ... 1000 ms) at most 6
         * connects fit in 1.5 s, however fast the machine. */
        static const char *const parts[] = {
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
            "{\"result\":{\"header\":{\"revision\":\"5\"},\"created\":true}}\nnot json\n",
            NULL};
        fakeSet(parts, 0);
        int base = nwlog;
        ec = newClient(url, NULL);
        CHECK(ec && etcdWatchPrefix(ec, "w/", 2, 0, watchCb, NULL) == 0);
        WAIT_FOR(countStatus(ETCD_WATCH_UP, base) >= 1, T_WAIT);
        int first = nwlog;
        runFor(1500);
        int ups = countStatus(ETCD_WATCH_UP, first);
        CHECK(ups <= 6);
        if (ups > 6) fprintf(stderr, "  the watch was reopened %d times in 1.5 s\n", ups);
        etcdRelease(ec);
    }
    TEST("etcd: a watch message over the reply limit drops the stream instead of growing without end") {
        /* "created", then a message whose newline never comes, the
         * connection held open: before the limit the watcher kept every
         * byte of it, for as long as the sender went on. */
        static const char *const parts[] = {
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
            "{\"result\":{\"header\":{\"revision\":\"5\"},\"created\":true}}\n{\"result\":{\"pad\":\"",
            NULL};
        fakeSet(parts, 1);
        fakeSetFiller(4u << 20, NULL);
        int base = nwlog;
        ec = newClient(url, NULL);
        if (ec) etcdSetReplyLimit(ec, 1u << 20);
        CHECK(ec && etcdWatchPrefix(ec, "w/", 2, 0, watchCb, NULL) == 0);
        WAIT_FOR(countStatus(ETCD_WATCH_DOWN, base) >= 1, T_WAIT);
        CHECK(countStatus(ETCD_WATCH_UP, base) >= 1 && countStatus(ETCD_WATCH_DOWN, base) >= 1);
        fakeSet((const char *const[]){NULL}, 0);
        etcdRelease(ec);
    }
    resClear(&a);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (access(ETCD_BIN, X_OK) != 0) {
        printf("SKIP: etcd tests: %s is not installed (Debian: etcd-server)\n", ETCD_BIN);
        printf("0 passed, 0 failed\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGALRM, onAlarm);
    alarm(WATCHDOG_S);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    el = aeCreateEventLoop(1024);
    aeCreateTimeEvent(el, 5, tickProc, NULL, NULL);

    int started = etcdSetup() == 0;
    TEST("etcd: start a private etcd") CHECK(started);
    if (started) {
        etcdClient *ec = newClient(etcd.url, NULL);
        TEST("etcd: etcdCreate") CHECK(ec != NULL);
        if (ec) {
            testKV(ec);
            testWatchAndOutage(ec);
            etcdRelease(ec);
        }
        testEndpointsAndRelease();
    }
    if (fakeStart() == 0) {
        testFake();
        fakeStop();
    }
    if (test_failed && etcd.log[0]) {
        tsServer dummy = {0};
        snprintf(dummy.log, sizeof(dummy.log), "%s", etcd.log);
        tsDumpLog(&dummy, 30);
    }
    etcdKill();
    removeDir(etcd.dir);
    wlogClear();
    aeDeleteEventLoop(el);
    curl_global_cleanup();
    return testReport();
}
