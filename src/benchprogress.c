/* benchprogress.c -- the running counter of a benchmark test, as
 * redis-benchmark shows it: one line, rewritten in place with '\r',
 *
 *   SET 16MiB: 40/64 (62%) rps=183.0 (overall: 171.4) 0.2 s, ETA 0.1 s
 *
 * and erased before the test's result is printed, so the terminal ends up
 * holding exactly what a redirected run writes.
 *
 * Why a thread of its own. The engines have nothing in common to hook a
 * timer into: the RESP engine is one epoll loop per --threads thread that
 * may sit in a 16 MiB readv, the library rows are blocking calls on many
 * threads, the baselines a tight loop on the main thread. A sampler that
 * wakes 4 times a second and reads one counter per engine costs them
 * nothing per request beyond an uncontended relaxed store, and the line is
 * refreshed at the same pace whatever the engine is doing. It sleeps on a
 * condition variable (CLOCK_MONOTONIC), so progressStop returns at once
 * instead of waiting out a tick.
 *
 * Rates: "rps" is the rate since the previous refresh, "overall" since the
 * start; the ETA divides what is left by the overall rate and is never
 * later than the deadline (--duration, or the --max-time cap). The line is
 * kept under 80 columns: a line that wraps cannot be erased with '\r'.
 *
 * Erasing writes spaces over the old line rather than an ANSI "erase line"
 * sequence, so output forced on (--progress) into a file or pipe holds no
 * escape codes.
 */
#include "benchprogress.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#define PROGRESS_TICK_NS 250000000ULL
#define PROGRESS_WIDTH 79

static struct {
    int on;
    FILE *out;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t tid;
    int running;             /* a thread is started (progressStart without Stop) */
    int stop;
    char label[64];
    long long total;
    uint64_t start, deadline;
    progressCountFn count;
    void *arg;
    int shown;               /* columns of the line on screen now */
} pg = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t monoNs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Seconds as "4.2 s" while short, "12m05s" when minutes matter. */
static void fmtSecs(char *buf, size_t len, double s) {
    if (s < 0) s = 0;
    if (s < 100) snprintf(buf, len, "%.1f s", s);
    else snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

/* Draws the line from one sample; called with pg.mu held. */
static void progressDraw(uint64_t now, uint64_t done, double rate) {
    char line[160], el[24], eta[24];
    double elapsed = (now - pg.start) / 1e9;
    double overall = elapsed > 0 ? done / elapsed : 0;
    double left = -1;   /* seconds to go, -1: unknown */
    if (pg.total > 0 && overall > 0)
        left = ((double)pg.total - (double)done) / overall;
    if (pg.deadline) {
        double dl = pg.deadline > now ? (pg.deadline - now) / 1e9 : 0;
        if (left < 0 || dl < left) left = dl;
    }
    fmtSecs(el, sizeof(el), elapsed);
    if (left >= 0) fmtSecs(eta, sizeof(eta), left);
    else snprintf(eta, sizeof(eta), "?");
    int n;
    if (pg.total > 0)
        n = snprintf(line, sizeof(line), "%s: %llu/%lld (%d%%) rps=%.1f (overall: %.1f) %s, ETA %s",
                     pg.label, (unsigned long long)done, pg.total,
                     (int)(100.0 * (double)done / (double)pg.total), rate, overall, el, eta);
    else
        n = snprintf(line, sizeof(line), "%s: %llu rps=%.1f (overall: %.1f) %s, ETA %s", pg.label,
                     (unsigned long long)done, rate, overall, el, eta);
    if (n < 0) return;
    if (n > PROGRESS_WIDTH) n = PROGRESS_WIDTH;
    /* Pad over the rest of a longer previous line. */
    int pad = pg.shown > n ? pg.shown - n : 0;
    fprintf(pg.out, "\r%.*s%*s", n, line, pad, "");
    if (pad) fprintf(pg.out, "\r%.*s", n, line);
    fflush(pg.out);
    pg.shown = n;
}

static void *progressMain(void *arg) {
    (void)arg;
    uint64_t next = pg.start + PROGRESS_TICK_NS, last_t = pg.start, last_done = 0;
    pthread_mutex_lock(&pg.mu);
    while (!pg.stop) {
        struct timespec ts = {.tv_sec = (time_t)(next / 1000000000ULL),
                              .tv_nsec = (long)(next % 1000000000ULL)};
        pthread_cond_timedwait(&pg.cv, &pg.mu, &ts);
        if (pg.stop) break;
        uint64_t now = monoNs();
        if (now < next) continue;   /* woken early */
        uint64_t done = pg.count(pg.arg);
        double rate = now > last_t ? (double)(done - last_done) / ((now - last_t) / 1e9) : 0;
        progressDraw(now, done, rate);
        last_t = now;
        last_done = done;
        next = now + PROGRESS_TICK_NS;
    }
    pthread_mutex_unlock(&pg.mu);
    return NULL;
}

void progressInit(FILE *out, int on) {
    pg.out = out;
    pg.on = on;
}

void progressStart(const char *label, long long total, uint64_t start_ns, uint64_t deadline_ns,
                   progressCountFn count, void *arg) {
    if (!pg.on || pg.running) return;
    snprintf(pg.label, sizeof(pg.label), "%s", label);
    pg.total = total;
    pg.start = start_ns;
    pg.deadline = deadline_ns;
    pg.count = count;
    pg.arg = arg;
    pg.stop = 0;
    pg.shown = 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&pg.cv, &ca);
    pthread_condattr_destroy(&ca);
    /* No progress is no reason to fail a run. */
    if (pthread_create(&pg.tid, NULL, progressMain, NULL) == 0) pg.running = 1;
    else pthread_cond_destroy(&pg.cv);
}

void progressStop(void) {
    if (!pg.running) return;
    pthread_mutex_lock(&pg.mu);
    pg.stop = 1;
    pthread_cond_signal(&pg.cv);
    pthread_mutex_unlock(&pg.mu);
    pthread_join(pg.tid, NULL);
    pthread_cond_destroy(&pg.cv);
    pg.running = 0;
    if (pg.shown) {
        fprintf(pg.out, "\r%*s\r", pg.shown, "");
        fflush(pg.out);
        pg.shown = 0;
    }
}
