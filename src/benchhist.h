/* benchhist.h -- a log-linear latency histogram with two significant digits.
 * See benchhist.c. Used by mooncake-benchmark; knows nothing about it. */
#ifndef BENCHHIST_H
#define BENCHHIST_H

#include <stdint.h>

/* 2^HIST_SUB_BITS sub-buckets per power of two: every value is kept with a
 * relative error below 1/2^HIST_SUB_BITS (0.8 %), i.e. two significant
 * decimal digits, over the whole uint64_t range. */
#define HIST_SUB_BITS 7
#define HIST_SUB_COUNT (1 << HIST_SUB_BITS)
#define HIST_BUCKETS ((64 - HIST_SUB_BITS) * HIST_SUB_COUNT + HIST_SUB_COUNT)

typedef struct hist {
    uint64_t count;              /* values recorded */
    uint64_t min, max;           /* exact extremes (min is UINT64_MAX when empty) */
    uint64_t counts[HIST_BUCKETS];
} hist;

void histReset(hist *h);
void histRecord(hist *h, uint64_t v);
void histMerge(hist *dst, const hist *src);
/* The value at percentile p (0..100]: the highest value that falls in the
 * same bucket as the p-th percentile sample, clamped to the exact max, so
 * the answer is never below the truth and at most 0.8 % above it.
 * 0 when the histogram is empty. */
uint64_t histPercentile(const hist *h, double p);

/* What one test measured, summed over threads. */
typedef struct benchStats {
    hist lat;                /* ns */
    uint64_t ops;            /* replies received (or library calls made) */
    uint64_t bytes;          /* value bytes sent (writes) or received (reads) */
    uint64_t errors;         /* error replies */
    uint64_t misses;         /* nil replies */
    uint64_t badvals;        /* verification failures */
    uint64_t requests;       /* requests completed (a batch command or call counts once) */
    int capped;              /* the --max-time cap stopped it before all its requests */
    uint64_t first_ns;       /* library rows: the first call of a fresh handle (ns), off the
                              * clock -- it attaches and maps segments, opens data connections */
    char firsterr[256];
} benchStats;

#endif
