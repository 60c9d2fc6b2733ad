/* test_mooncake_ride.c -- a server restart is a pause, not an error.
 *
 * A server with the append-only log on (appendfsync always: every write
 * acknowledged is in the log) is killed with SIGKILL at a moment of a
 * killer thread's choosing -- in the middle of whatever the writer was
 * doing -- and started again at once on the same port and directory, while
 * one handle keeps putting new keys, reading them back, and batching puts
 * and gets. Not one call may fail, and every key reads back byte for byte,
 * each time and at the end: the handle reconnects by itself, redoes a put
 * whose connection died (never ending it on the new one), and trusts
 * nothing it learnt from the old server (a restarted server's pool is
 * other memory under the same segment id, so an old shm mapping would put
 * bytes where no one reads them).
 *
 * Both data paths: shm (unix:// URI, the pool's memfd mapped) and tcp.
 *
 * Part of test_mooncake (test_mooncake.c: the group table and main()).
 */
#include "test_mooncake.h"

#include <pthread.h>
#include <stdatomic.h>

#define RIDE_KEYS 240
#define RIDE_BATCH 4
#define RIDE_KILLS 2

/* Starts (or starts again) the server s describes: same port, same dir,
 * the log on. 0 once the process runs; it need not answer yet (the
 * writer's calls ride through that too). */
static int rideLaunch(tsServer *s) {
    const char *bin = tsServerBinary();
    if (!bin) return -1;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", s->port);
    const char *argv[] = {bin, "--port", portstr, "--bind", "127.0.0.1", "--unixsocket", s->sock,
                          "--unixsocketperm", "700", "--dir", s->dir, "--protected-mode", "no",
                          "--segment-size", "64mb", "--appendonly", "yes", "--appendfsync", "always", NULL};
    pid_t self = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        tsDieWithParent(self);
        int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    tsTrack(pid);
    return 0;
}

static int rideStart(tsServer *s) {
    memset(s, 0, sizeof(*s));
    if (testMkdtemp(s->dir, sizeof(s->dir), "mcride") != 0) return -1;
    snprintf(s->sock, sizeof(s->sock), "%s/mc.sock", s->dir);
    snprintf(s->log, sizeof(s->log), "%s/server.log", s->dir);
    snprintf(s->unix_uri, sizeof(s->unix_uri), "unix://%s", s->sock);
    s->port = tsFreePort();
    snprintf(s->tcp_uri, sizeof(s->tcp_uri), "tcp://127.0.0.1:%d", s->port);
    if (rideLaunch(s) != 0) return -1;
    long long deadline = tsNowMs() + 15000;
    while (tsNowMs() < deadline && tsAlive(s))
        if (tsPing(s->port) && access(s->sock, F_OK) == 0) return 0;
        else tsSleepMs(10);
    tsDumpLog(s, 40);
    return -1;
}

static void rideCleanup(tsServer *s) {
    if (s->pid) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        tsUntrack(s->pid);
        s->pid = 0;
    }
    if (s->dir[0]) {
        char cmd[sizeof(s->dir) + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir); /* the log's own directory too */
        if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", s->dir);
        s->dir[0] = '\0';
    }
}

/* Key i's value: its length and bytes follow from i alone. */
static size_t rideLen(int i) { return 1 + (size_t)(mix64((uint64_t)i * 7919) % (48 * KiB)); }

static void rideFill(char *buf, int i, size_t n) {
    uint64_t x = mix64((uint64_t)i + 1);
    for (size_t j = 0; j < n; j++) {
        if (j % 8 == 0) x = mix64(x);
        buf[j] = (char)(x >> (8 * (j % 8)));
    }
}

typedef struct {
    tsServer *s;
    atomic_int progress;         /* the writer's calls so far */
    atomic_int kills;            /* restarts done */
    atomic_int done;             /* the writer is done: the killer may end */
    int kill_at[RIDE_KILLS];
    int failed;                  /* the killer could not restart the server */
} rideState;

/* Kills the server once the writer's progress passes each mark, and starts
 * it again at once (not waiting for it to answer: the writer rides through
 * that), then waits until it answers so the next kill is of a server
 * that did start. */
static void *rideKiller(void *arg) {
    rideState *st = arg;
    for (int k = 0; k < RIDE_KILLS; k++) {
        while (atomic_load(&st->progress) < st->kill_at[k]) tsSleepMs(1);
        kill(st->s->pid, SIGKILL);
        waitpid(st->s->pid, NULL, 0);
        tsUntrack(st->s->pid);
        st->s->pid = 0;
        if (rideLaunch(st->s) != 0) {
            st->failed = 1;
            break;
        }
        long long deadline = tsNowMs() + 15000;
        while (!tsPing(st->s->port) && tsNowMs() < deadline) tsSleepMs(5);
        atomic_fetch_add(&st->kills, 1);
    }
    /* The servers it started die with the thread that forked them
     * (PR_SET_PDEATHSIG is per thread): it ends with the test. */
    while (!atomic_load(&st->done)) tsSleepMs(5);
    return NULL;
}

static int rideCheck(mc_client *c, int i, char *buf, const char *when) {
    size_t n = rideLen(i);
    char key[32], *want = xmalloc(n);
    snprintf(key, sizeof(key), "ride:%d", i);
    rideFill(want, i, n);
    long long got = mc_get(c, key, strlen(key), buf, 48 * KiB + 1);
    int ok = got == (long long)n && !memcmp(buf, want, n);
    if (!ok)
        fprintf(stderr, "  %s: get %s: %lld (want %zu bytes) %s\n", when, key, got, n,
                got < 0 ? lastErr(c) : "bytes differ");
    free(want);
    return ok;
}

static void rideRun(const char *what, int transport, int use_unix) {
    int failed_before = test_failed;
    tsServer s;
    int started = rideStart(&s) == 0;
    char name[160];
    snprintf(name, sizeof(name), "ride (%s): the server killed -9 and restarted twice mid-traffic: no call fails, "
                                 "every key byte for byte", what);
    TEST(name) {
        CHECK(started);
        mc_client *c = started ? mcOpen(use_unix ? s.unix_uri : s.tcp_uri, NULL, transport) : NULL;
        CHECK(c != NULL);
        rideState st = {.s = &s};
        st.kill_at[0] = RIDE_KEYS / 3;
        st.kill_at[1] = 2 * RIDE_KEYS / 3;
        pthread_t killer;
        int have_killer = c && pthread_create(&killer, NULL, rideKiller, &st) == 0;
        char *buf = xmalloc(48 * KiB + 1);
        int errors = 0, bad = 0;
        for (int i = 0; have_killer && i < RIDE_KEYS && errors + bad < 5; i++) {
            char key[32];
            size_t n = rideLen(i);
            char *val = xmalloc(n);
            snprintf(key, sizeof(key), "ride:%d", i);
            rideFill(val, i, n);
            if (i % 10 == 9) {
                /* A batch: this key and the next ones put together, and
                 * read back together. */
                mc_kv items[RIDE_BATCH];
                char keys[RIDE_BATCH][32];
                char *vals[RIDE_BATCH];
                int res[RIDE_BATCH];
                int m = 0;
                for (; m < RIDE_BATCH && i + m < RIDE_KEYS; m++) {
                    snprintf(keys[m], sizeof(keys[m]), "ride:%d", i + m);
                    vals[m] = xmalloc(rideLen(i + m));
                    rideFill(vals[m], i + m, rideLen(i + m));
                    items[m] = (mc_kv){keys[m], strlen(keys[m]), vals[m], rideLen(i + m)};
                }
                int rc = mc_batch_put(c, (size_t)m, items, NULL, res);
                if (rc != m) {
                    fprintf(stderr, "  batch put at %d: %d (%d %d ...) %s\n", i, rc, res[0], m > 1 ? res[1] : 0,
                            lastErr(c));
                    errors++;
                }
                atomic_fetch_add(&st.progress, 1);
                long long got[RIDE_BATCH];
                for (int j = 0; j < m; j++) {
                    memset(vals[j], 0, rideLen(i + j));
                    items[j].buf = vals[j];
                }
                rc = mc_batch_get(c, (size_t)m, items, got);
                for (int j = 0; j < m; j++) {
                    char *want = xmalloc(rideLen(i + j));
                    rideFill(want, i + j, rideLen(i + j));
                    if (got[j] != (long long)rideLen(i + j) || memcmp(want, vals[j], rideLen(i + j))) {
                        fprintf(stderr, "  batch get ride:%d: %lld %s\n", i + j, got[j], lastErr(c));
                        bad++;
                    }
                    free(want);
                    free(vals[j]);
                }
                atomic_fetch_add(&st.progress, 1);
                i += m - 1;
            } else {
                int rc = mc_put(c, key, strlen(key), val, n, NULL);
                if (rc != MC_OK) {
                    fprintf(stderr, "  put %s: %d %s\n", key, rc, lastErr(c));
                    errors++;
                }
                atomic_fetch_add(&st.progress, 1);
                bad += !rideCheck(c, i, buf, "just written");
                atomic_fetch_add(&st.progress, 1);
                bad += !rideCheck(c, (int)(mix64((uint64_t)i) % (uint64_t)(i + 1)), buf, "written before");
            }
            free(val);
        }
        atomic_store(&st.progress, RIDE_KEYS * 4); /* a killer still waiting: its marks are passed */
        while (have_killer && atomic_load(&st.kills) < RIDE_KILLS && !st.failed) tsSleepMs(5);
        CHECK(!st.failed);
        CHECK_EQ(atomic_load(&st.kills), RIDE_KILLS);
        CHECK_EQ(errors, 0);
        CHECK_EQ(bad, 0);
        /* After the last restart: every key, from the log. */
        int missing = 0;
        for (int i = 0; c && i < RIDE_KEYS && missing < 5; i++) missing += !rideCheck(c, i, buf, "at the end");
        CHECK_EQ(missing, 0);
        if (have_killer) {
            atomic_store(&st.done, 1);
            pthread_join(killer, NULL);
        }
        free(buf);
        mcClose(&c);
    }
    if (started && test_failed > failed_before) tsDumpLog(&s, 30);
    rideCleanup(&s);
}

void testRide(void) {
    rideRun("shm", MC_TRANSPORT_AUTO, 1);
    rideRun("tcp", MC_TRANSPORT_TCP, 0);
}
