/* benchlib.h -- mooncake-benchmark's libmooncake rows and baselines (benchlib.c). */
#ifndef BENCHLIB_H
#define BENCHLIB_H

#include <stddef.h>

#include "benchhist.h"

typedef struct benchLibConfig {
    const char *uri;        /* tcp://h:p or unix:///path */
    const char *auth;
    int clients;            /* threads, each with its own handle */
    long long requests;     /* calls per test (a batch call counts once) */
    double duration;        /* seconds instead of requests, if > 0 */
    double maxtime;         /* stop issuing after this many seconds, if > 0 */
    const char *label;      /* the test as its progress line names it */
    int transport;          /* MC_TRANSPORT_* */
    int streams;            /* tcp connections per transfer (mc_set_streams), 0: default */
    int batch;              /* keys per mc_batch_* call */
    int iov;                /* buffers per mcputv/mcgetv call (0: 1) */
    size_t span;            /* distinct value bytes per client, cycled a batch per call (0: one batch) */
    int replicas;
    int check;
    long long warmup;       /* calls per client off the clock before the row (the first counts) */
} benchLibConfig;

/* The printed label of a library test or baseline, NULL if name is not one. */
const char *benchLibLabel(const char *name);
/* Runs one test at one size; 0, or -1 if it could not run (message printed). */
int benchLibRun(const char *name, size_t vlen, const benchLibConfig *cfg, benchStats *out, double *secs);

#endif
