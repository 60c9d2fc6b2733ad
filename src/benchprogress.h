/* benchprogress.h -- a live progress line for long-running tests
 * (benchprogress.c). Used by mooncake-benchmark; knows nothing about it. */
#ifndef BENCHPROGRESS_H
#define BENCHPROGRESS_H

#include <stdint.h>
#include <stdio.h>

/* Requests done so far. Called from the progress thread while the test's
 * own threads run, so it must read counters they update atomically. */
typedef uint64_t (*progressCountFn)(void *arg);

/* Whether progress is shown at all, and where. Off until called; every
 * other call is a no-op while off. */
void progressInit(FILE *out, int on);

/* Starts refreshing one test's line about 4 times a second (the first
 * after a quarter second, so a test that ends sooner prints nothing).
 * total: requests planned, <= 0 if unknown (runs until the deadline);
 * start_ns, deadline_ns: CLOCK_MONOTONIC, deadline 0 if none. */
void progressStart(const char *label, long long total, uint64_t start_ns, uint64_t deadline_ns,
                   progressCountFn count, void *arg);

/* Stops the refresh and erases the line, so the caller's next output
 * starts at the beginning of a clean line. */
void progressStop(void);

#endif
