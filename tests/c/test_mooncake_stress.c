/* test_mooncake_stress.c -- one handle shared by many threads, as the
 * engines share a store between their I/O threads (SGLang's HiCache runs
 * several on one object; LMCache and vLLM's connector use pools).
 *
 *  - stress: 12 threads on ONE handle (shm, then tcp) mix put, get, batch
 *    put/get, exists, remove and async batches on keys of their own and on
 *    keys they all replace; every value is checked byte for byte (a shared
 *    key's value names its version and carries a checksum, so a torn or
 *    mixed read is caught), and each thread's mc_last_error after its own
 *    failing call is the text of that call (a buffer size only it uses).
 *  - last-error: two threads fail in turn on one handle, each reading its
 *    error after the other's failure: the text is per thread.
 *  - close: mc_close while 8 threads are inside calls on the handle (the
 *    server stopped: one stuck in I/O, the others waiting for the lock):
 *    the one in I/O ends with MC_ERR_IO at its timeout, the others with
 *    MC_ERR_INVALID instead of each running on the closing handle (or
 *    waiting on a lock mc_close destroyed), and mc_close returns.
 *
 * Bounded: fixed iteration counts under a deadline, a few seconds in all
 * (longer under ThreadSanitizer, which is what the group is for too:
 * SANITIZER=thread, see src/Makefile).
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main();
 * test_mooncake.h: the shared helpers).
 */
#include "test_mooncake.h"

#include "mc_client.h"

#include <stdatomic.h>

#define ST_THREADS 12
#define ST_ITERS 40
#define ST_OWN_KEYS 4
#define ST_SHARED_KEYS 3
#define ST_MAX (48 * KiB)

/* ---- values ---------------------------------------------------------------------- */

/* A shared key's value (mctest.h's vvMake), of a length its version picks. */
static size_t stLen(uint64_t key, uint64_t version) {
    return sizeof(vvHeader) + 1 + (size_t)(mix64(key * 977 + version) % (ST_MAX - sizeof(vvHeader) - 1));
}

static size_t stMake(char *buf, uint64_t key, uint64_t version) { return vvMake(buf, stLen(key, version), key, version); }

static const char *stCheck(const char *buf, long long n, uint64_t key, char *scratch) {
    return vvCheck(buf, n, key, stLen, scratch);
}

/* A thread's own key's value: from (thread, key, round). */
static size_t ownMake(char *buf, int t, int k, int round) {
    uint64_t seed = mix64(((uint64_t)t << 40) ^ ((uint64_t)k << 20) ^ (uint64_t)round);
    size_t len = 1 + (size_t)(seed % (ST_MAX - 1));
    fillPattern(buf, len, seed);
    return len;
}

/* ---- the workers ------------------------------------------------------------------ */

typedef struct {
    mc_client *c;
    const char *tag;
    int id;
    long long deadline_ms;
    int ops, failures, errtexts;
    char first_failure[320];
} stWorker;

static void stFail(stWorker *w, const char *fmt, ...) {
    if (w->failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->first_failure, sizeof(w->first_failure), fmt, ap);
        va_end(ap);
    }
}

/* The error text of this thread's own failing get: a buffer of 100 + id
 * bytes, too small for the value, names that size. */
static void stErrText(stWorker *w, const char *key, size_t keylen, size_t size) {
    char small[128];
    size_t cap = 100 + (size_t)w->id;
    long long got = mc_get(w->c, key, keylen, small, cap);
    if (got != MC_ERR_TOO_SMALL) {
        stFail(w, "thread %d: mc_get(%s, cap %zu) of %zu bytes: %lld, not TOO_SMALL", w->id, key, cap, size, got);
        return;
    }
    char want[160];
    snprintf(want, sizeof(want), "value is %zu bytes, buffer %zu", size, cap);
    const char *e = mc_last_error(w->c);
    if (strcmp(e ? e : "", want)) stFail(w, "thread %d: mc_last_error is '%s', not its own '%s'", w->id, e, want);
    else w->errtexts++;
}

static void *stThread(void *arg) {
    stWorker *w = arg;
    char *buf = xmalloc(ST_MAX), *got = xmalloc(ST_MAX), *scratch = xmalloc(ST_MAX);
    char *bvals[ST_OWN_KEYS], *bgot[ST_OWN_KEYS];
    for (int k = 0; k < ST_OWN_KEYS; k++) bvals[k] = xmalloc(ST_MAX), bgot[k] = xmalloc(ST_MAX);
    char keys[ST_OWN_KEYS][48];
    for (int k = 0; k < ST_OWN_KEYS; k++) snprintf(keys[k], sizeof(keys[k]), "st:%s:%d:%d", w->tag, w->id, k);
    mc_put_opts replace = {0};
    replace.replace = 1;
    uint64_t rng = mix64((uint64_t)w->id * 31 + 5);

    for (int i = 0; i < ST_ITERS && tsNowMs() < w->deadline_ms; i++) {
        rng = mix64(rng);
        int k = (int)(rng % ST_OWN_KEYS);
        const char *key = keys[k];
        size_t kl = strlen(key);
        w->ops++;
        switch ((rng >> 16) % 6) {
        case 0: { /* own key: put, get, the error text of a too small get */
            size_t len = ownMake(buf, w->id, k, i);
            int rc = mc_put(w->c, key, kl, buf, len, &replace);
            if (rc != MC_OK) {
                stFail(w, "thread %d: mc_put(%s): %d (%s)", w->id, key, rc, lastErr(w->c));
                break;
            }
            long long n = mc_get(w->c, key, kl, got, ST_MAX);
            if (n != (long long)len || memcmp(got, buf, len))
                stFail(w, "thread %d: mc_get(%s): %lld bytes, want %zu, same %d", w->id, key, n, len,
                       n == (long long)len && !memcmp(got, buf, len));
            if (len > 100 + (size_t)w->id) stErrText(w, key, kl, len);
            break;
        }
        case 1: { /* a shared key: replace it, read one whole version of another */
            uint64_t sk = (rng >> 24) % ST_SHARED_KEYS;
            char skey[32];
            snprintf(skey, sizeof(skey), "st:%s:shared:%llu", w->tag, (unsigned long long)sk);
            size_t len = stMake(buf, sk, ((uint64_t)w->id << 32) | (uint64_t)(i + 1));
            int rc = mc_put(w->c, skey, strlen(skey), buf, len, &replace);
            if (rc != MC_OK && rc != MC_ERR_EXISTS) /* EXISTS: another thread's put of it in flight */
                stFail(w, "thread %d: mc_put(%s): %d (%s)", w->id, skey, rc, lastErr(w->c));
            uint64_t rk = (rng >> 32) % ST_SHARED_KEYS;
            snprintf(skey, sizeof(skey), "st:%s:shared:%llu", w->tag, (unsigned long long)rk);
            long long n = mc_get(w->c, skey, strlen(skey), got, ST_MAX);
            if (n < 0) {
                stFail(w, "thread %d: mc_get(%s): %lld (%s)", w->id, skey, n, lastErr(w->c));
                break;
            }
            const char *why = stCheck(got, n, rk, scratch);
            if (why) stFail(w, "thread %d: mc_get(%s): %s", w->id, skey, why);
            break;
        }
        case 2: { /* own keys: a batch put, a batch get, exists */
            mc_kv items[ST_OWN_KEYS], gets[ST_OWN_KEYS];
            size_t lens[ST_OWN_KEYS];
            int pr[ST_OWN_KEYS], er[ST_OWN_KEYS];
            long long gr[ST_OWN_KEYS];
            mc_key ek[ST_OWN_KEYS];
            for (int j = 0; j < ST_OWN_KEYS; j++) {
                lens[j] = ownMake(bvals[j], w->id, j, 1000 + i);
                items[j] = (mc_kv){keys[j], strlen(keys[j]), bvals[j], lens[j]};
                gets[j] = (mc_kv){keys[j], strlen(keys[j]), bgot[j], ST_MAX};
                ek[j] = (mc_key){keys[j], strlen(keys[j])};
            }
            int rc = mc_batch_put(w->c, ST_OWN_KEYS, items, &replace, pr);
            if (rc != ST_OWN_KEYS) {
                stFail(w, "thread %d: mc_batch_put: %d (%s)", w->id, rc, lastErr(w->c));
                break;
            }
            rc = mc_batch_exists(w->c, ST_OWN_KEYS, ek, 0, er);
            if (rc != ST_OWN_KEYS) stFail(w, "thread %d: mc_batch_exists of its own keys: %d", w->id, rc);
            rc = mc_batch_get(w->c, ST_OWN_KEYS, gets, gr);
            if (rc != ST_OWN_KEYS) stFail(w, "thread %d: mc_batch_get: %d (%s)", w->id, rc, lastErr(w->c));
            for (int j = 0; j < ST_OWN_KEYS && rc == ST_OWN_KEYS; j++)
                if (gr[j] != (long long)lens[j] || memcmp(bgot[j], bvals[j], lens[j]))
                    stFail(w, "thread %d: mc_batch_get item %d: %lld bytes, want %zu", w->id, j, gr[j], lens[j]);
            break;
        }
        case 3: { /* own key: remove, then gone for get and exists */
            size_t len = ownMake(buf, w->id, k, i);
            if (mc_put(w->c, key, kl, buf, len, &replace) != MC_OK) {
                stFail(w, "thread %d: mc_put(%s) before remove (%s)", w->id, key, lastErr(w->c));
                break;
            }
            int rc = mc_remove(w->c, key, kl);
            if (rc != 1) stFail(w, "thread %d: mc_remove(%s): %d", w->id, key, rc);
            long long n = mc_get(w->c, key, kl, got, ST_MAX);
            if (n != MC_ERR_NOT_FOUND) stFail(w, "thread %d: mc_get(%s) after remove: %lld", w->id, key, n);
            if ((rc = mc_exists(w->c, key, kl)) != 0) stFail(w, "thread %d: mc_exists(%s) after remove: %d", w->id, key, rc);
            break;
        }
        case 4: { /* own keys: an async batch put, then an async batch get */
            struct iovec piov[ST_OWN_KEYS], giov[ST_OWN_KEYS];
            mc_kvv pk[ST_OWN_KEYS], gk[ST_OWN_KEYS];
            size_t lens[ST_OWN_KEYS];
            for (int j = 0; j < ST_OWN_KEYS; j++) {
                lens[j] = ownMake(bvals[j], w->id, j, 2000 + i);
                piov[j] = (struct iovec){bvals[j], lens[j]};
                giov[j] = (struct iovec){bgot[j], ST_MAX};
                pk[j] = (mc_kvv){keys[j], strlen(keys[j]), &piov[j], 1};
                gk[j] = (mc_kvv){keys[j], strlen(keys[j]), &giov[j], 1};
            }
            mc_op *op = mc_batch_put_async(w->c, ST_OWN_KEYS, pk, &replace);
            int rc = op ? mc_op_wait(op, 20000) : MC_ERR_IO;
            mc_op_free(op);
            if (rc != ST_OWN_KEYS) {
                stFail(w, "thread %d: mc_batch_put_async: %d (%s)", w->id, rc, lastErr(w->c));
                break;
            }
            op = mc_batch_get_async(w->c, ST_OWN_KEYS, gk);
            rc = op ? mc_op_wait(op, 20000) : MC_ERR_IO;
            const long long *r = op && rc == ST_OWN_KEYS ? mc_op_results(op) : NULL;
            if (r == NULL) stFail(w, "thread %d: mc_batch_get_async: %d (%s)", w->id, rc, lastErr(w->c));
            for (int j = 0; r && j < ST_OWN_KEYS; j++)
                if (r[j] != (long long)lens[j] || memcmp(bgot[j], bvals[j], lens[j]))
                    stFail(w, "thread %d: async get item %d: %lld bytes, want %zu", w->id, j, r[j], lens[j]);
            mc_op_free(op);
            break;
        }
        default: { /* a key no one writes: not found, and the error text is this call's */
            char nkey[48];
            snprintf(nkey, sizeof(nkey), "st:%s:none:%d", w->tag, w->id);
            long long n = mc_get(w->c, nkey, strlen(nkey), got, ST_MAX);
            if (n != MC_ERR_NOT_FOUND) stFail(w, "thread %d: mc_get(%s): %lld, not NOT_FOUND", w->id, nkey, n);
            else if (strcmp(lastErr(w->c), "no such key"))
                stFail(w, "thread %d: mc_last_error after its NOT_FOUND is '%s'", w->id, lastErr(w->c));
            break;
        }
        }
    }
    for (int k = 0; k < ST_OWN_KEYS; k++) free(bvals[k]), free(bgot[k]);
    free(buf);
    free(got);
    free(scratch);
    return NULL;
}

static void stRun(mc_client *c, const char *tag) {
    if (!c) {
        CHECK(c != NULL);
        return;
    }
    /* Every shared key has a first version, so every get finds one. */
    char *buf = xmalloc(ST_MAX);
    mc_put_opts replace = {0};
    replace.replace = 1;
    for (uint64_t sk = 0; sk < ST_SHARED_KEYS; sk++) {
        char skey[32];
        snprintf(skey, sizeof(skey), "st:%s:shared:%llu", tag, (unsigned long long)sk);
        size_t len = stMake(buf, sk, 0);
        CHECK_EQ(put(c, skey, buf, len, &replace), MC_OK);
    }
    free(buf);
    stWorker w[ST_THREADS];
    pthread_t t[ST_THREADS];
    long long deadline = tsNowMs() + 20000;
    int started = 0;
    for (int i = 0; i < ST_THREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].c = c;
        w[i].tag = tag;
        w[i].id = i;
        w[i].deadline_ms = deadline;
        if (pthread_create(&t[i], NULL, stThread, &w[i]) != 0) break;
        started++;
    }
    CHECK_EQ(started, ST_THREADS);
    int ops = 0, failures = 0, errtexts = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        ops += w[i].ops;
        failures += w[i].failures;
        errtexts += w[i].errtexts;
        if (w[i].failures) fprintf(stderr, "  %d failures, the first: %s\n", w[i].failures, w[i].first_failure);
    }
    CHECK_EQ(failures, 0);
    CHECK(ops > ST_THREADS); /* the deadline did not cut every thread short */
    CHECK(errtexts > 0);
}

/* ---- mc_last_error per thread, deterministically ----------------------------------- */

typedef struct {
    mc_client *c;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int turn;        /* whose step it is: 0 A fails, 1 B fails, 2 A reads */
    char a_text[256];
} ltState;

static void ltWaitTurn(ltState *s, int turn) {
    pthread_mutex_lock(&s->lock);
    while (s->turn < turn) pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

static void ltNext(ltState *s) {
    pthread_mutex_lock(&s->lock);
    s->turn++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static void *ltB(void *arg) {
    ltState *s = arg;
    char small[8];
    ltWaitTurn(s, 1);
    mc_get(s->c, "lt:value", 8, small, 2); /* "value is 4096 bytes, buffer 2" */
    ltNext(s);
    return NULL;
}

/* ---- mc_close under calls in flight -------------------------------------------------- */

typedef struct {
    mc_client *c;
    atomic_int *entered;
    long long rc;
} clWorker;

static void *clThread(void *arg) {
    clWorker *w = arg;
    char buf[64];
    atomic_fetch_add(w->entered, 1);
    /* Nothing on the handle after the call returns: mc_close may have
     * freed it by then (its mc_last_error included). */
    w->rc = mc_get(w->c, "cl:key", 6, buf, sizeof(buf));
    return NULL;
}

#define CL_THREADS 8

/* The calls inside the handle (mooncake.c, "Threads"): the test's way to
 * know its threads are in their calls, not about to start them. */
static int gateUsers(mc_client *c) {
    pthread_mutex_lock(&c->gate_lock);
    int n = c->users;
    pthread_mutex_unlock(&c->gate_lock);
    return n;
}

void testStress(void) {
    const char *group = "stress";
    int failed0 = test_failed;
    tsServer s;
    watchdog();
    if (!tsGroupStarted(tsStart(&s, "--segment-size", "128mb", NULL), &s, group)) return;

    TEST("stress: 12 threads share one shm handle: put/get/batch/exists/remove/async, byte-exact, own error texts") {
        mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_SHM);
        stRun(c, "shm");
        mcClose(&c);
    }
    alarm(GROUP_WATCHDOG_S * 2); /* the second run; TSan makes each several times slower */
    TEST("stress: 12 threads share one tcp handle: the same, over tcp") {
        mc_client *c = mcOpen(s.tcp_uri, NULL, MC_TRANSPORT_TCP);
        stRun(c, "tcp");
        mcClose(&c);
    }

    watchdog();
    TEST("last-error: a thread's mc_last_error is its own call's, not the last call's on the handle") {
        ltState st = {0};
        st.c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        pthread_mutex_init(&st.lock, NULL);
        pthread_cond_init(&st.cond, NULL);
        char *v = xmalloc(4096);
        fillPattern(v, 4096, 3);
        CHECK(st.c != NULL);
        if (st.c && put(st.c, "lt:value", v, 4096, NULL) == MC_OK) {
            pthread_t b;
            CHECK(pthread_create(&b, NULL, ltB, &st) == 0);
            char small[8];
            long long rc = mc_get(st.c, "lt:value", 8, small, 1); /* A: "... buffer 1" */
            ltNext(&st);
            ltWaitTurn(&st, 2); /* B has failed its own way meanwhile */
            snprintf(st.a_text, sizeof(st.a_text), "%s", mc_last_error(st.c));
            pthread_join(b, NULL);
            CHECK_EQ(rc, MC_ERR_TOO_SMALL);
            if (strcmp(st.a_text, "value is 4096 bytes, buffer 1"))
                fprintf(stderr, "  thread A reads '%s'\n", st.a_text);
            CHECK(!strcmp(st.a_text, "value is 4096 bytes, buffer 1"));
        }
        free(v);
        mcClose(&st.c);
        pthread_mutex_destroy(&st.lock);
        pthread_cond_destroy(&st.cond);
    }

    TEST("close: mc_close while 8 threads are inside calls (server stopped): each fails cleanly, close returns") {
        mc_client *c = mcOpen(s.unix_uri, NULL, MC_TRANSPORT_AUTO);
        CHECK(c != NULL);
        if (c) {
            char v[32] = "value";
            CHECK_EQ(put(c, "cl:key", v, sizeof(v), NULL), MC_OK);
            CHECK_EQ(mc_set_timeouts(c, 2000, 1500), MC_OK);
            /* Stopped, the server answers nothing: the first get holds the
             * handle in I/O until its timeout, the others wait for its
             * lock -- all of them inside calls when mc_close begins. */
            CHECK(kill(s.pid, SIGSTOP) == 0);
            atomic_int entered = 0;
            clWorker w[CL_THREADS];
            pthread_t t[CL_THREADS];
            int started = 0;
            for (int i = 0; i < CL_THREADS; i++) {
                w[i] = (clWorker){c, &entered, 0};
                if (pthread_create(&t[i], NULL, clThread, &w[i]) == 0) started++;
            }
            while (atomic_load(&entered) < started) tsSleepMs(1);
            /* Every one inside its call (counted at the handle's gate)
             * before mc_close: a call that began after it returned would
             * use freed memory, whatever the machine's load. */
            while (gateUsers(c) < started) tsSleepMs(1);
            mc_close(c);
            c = NULL;
            kill(s.pid, SIGCONT);
            int io = 0, refused = 0;
            for (int i = 0; i < started; i++) {
                pthread_join(t[i], NULL);
                if (w[i].rc == MC_ERR_IO) io++;
                else if (w[i].rc == MC_ERR_INVALID) refused++;
                else fprintf(stderr, "  thread %d: %lld\n", i, w[i].rc);
            }
            if (refused == 0) fprintf(stderr, "  %d of %d calls ran to their I/O timeout\n", io, started);
            CHECK_EQ(started, CL_THREADS);
            CHECK_EQ(io + refused, started);
            CHECK(io <= 1);
        }
    }
    tsGroupFinish(&s, group, failed0);
}
