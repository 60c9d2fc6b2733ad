/* testgroup.h -- one server per test group, for the C tests that use both
 * testhelp.h (TEST/CHECK) and testserver.h (tsStart/tsStop).
 *
 * A group starts its own server so a crash or a leak is pinned to the group
 * that caused it: the server that would not start is a failed test, and the
 * group ends by checking that the server survived everything, exits cleanly
 * on SIGTERM and logged no sanitizer report, showing its log if anything in
 * the group failed.
 *
 * Include after testhelp.h and testserver.h.
 */
#ifndef TESTGROUP_H
#define TESTGROUP_H

#ifndef GROUP_WATCHDOG_S
#define GROUP_WATCHDOG_S 30
#endif

/* The watchdog: a group stuck for GROUP_WATCHDOG_S seconds (the including
 * file defines it) still ends the program with a count line the runner
 * understands, and leaves no servers behind. Install tsOnAlarm for SIGALRM
 * and call watchdog() at the start of every group. */
static inline void tsOnAlarm(int sig) {
    (void)sig;
    tsKillAll();
    char msg[512];
    int n = snprintf(msg, sizeof(msg), "[err] %s (watchdog: stuck for %d s)\n%d passed, %d failed\n",
                     test_cur_name ? test_cur_name : "(between tests)", GROUP_WATCHDOG_S, test_passed,
                     test_failed + 1);
    if (n > 0 && write(1, msg, (size_t)n) < 0) {}
    _exit(1);
}

static inline void watchdog(void) { alarm(GROUP_WATCHDOG_S); }

/* The start of a group program's main: output line by line (the runner
 * reads it as it comes), SIGPIPE to onPipe (SIG_IGN: ignored), the
 * watchdog's alarm, and the banner naming the program, the library and the
 * server found. Returns the group filter (argv[1]) or NULL. */
static inline const char *groupMainStart(const char *program, const char *libversion, void (*onPipe)(int),
                                         int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = onPipe;
    sigaction(SIGPIPE, &sa, NULL);
    sa.sa_handler = tsOnAlarm;
    sigaction(SIGALRM, &sa, NULL);
    const char *only = argc >= 2 ? argv[1] : NULL;
    const char *bin = tsServerBinary();
    printf("%s: libmooncake %s, server %s%s%s\n", program, libversion, bin ? bin : "(none found)",
           only ? ", groups matching " : "", only ? only : "");
    return only;
}

/* malloc that does not return NULL: a test without memory stops, servers killed. */
static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        tsKillAll();
        abort();
    }
    return p;
}

/* 1 if tsStart returned rc == 0, else a failed test named after the group. */
static inline int tsGroupStarted(int rc, tsServer *s, const char *group) {
    if (rc == 0) return 1;
    char name[160];
    snprintf(name, sizeof(name), "%s: start a mooncake-server", group);
    TEST(name) CHECK(rc == 0);
    tsCleanup(s);
    return 0;
}

static inline void tsGroupFinish(tsServer *s, const char *group, int failed_before) {
    char name[160];
    snprintf(name, sizeof(name), "%s: the server is still up and exits cleanly on SIGTERM", group);
    TEST(name) {
        CHECK(tsAlive(s));
        int st = tsStop(s);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            fprintf(stderr, "  wait status %d (signal %d)\n", st, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        CHECK(!tsLogHas(s, "AddressSanitizer") && !tsLogHas(s, "runtime error:") && !tsLogHas(s, "LeakSanitizer"));
    }
    if (test_failed > failed_before) {
        /* Enough to see why the server closed a connection (its verbose
         * lines), and the whole log kept for what falls outside them. */
        char kept[sizeof(s->dir) + 8];
        tsDumpLog(s, 200);
        if (tsKeepLog(s, kept, sizeof(kept)) == 0) fprintf(stderr, "  the whole server log is kept in %s\n", kept);
    }
    tsCleanup(s);
}

#endif
