/* latency.c -- per-command latency histograms for INFO latencystats.
 *
 * Redis reports p50/p99/p99.9 per command from an HDR histogram. One is
 * kept here per command that ran, so it must be small and cheap to feed:
 * durations in microseconds go into log-linear buckets, 8 per power of two
 * (a percentile is exact to within 12.5 %, enough to tell 1 us from 10),
 * 3 KiB per command, allocated at its first call. Recording is a
 * count-leading-zeros and an increment on the event loop's thread; no
 * locks, nothing on the reply path.
 */
#include "latency.h"

#include <string.h>

#include "zmalloc.h"

#define LAT_SUB_BITS 3
#define LAT_SUB (1 << LAT_SUB_BITS)
#define LAT_MAX_BIT 47 /* 2^47 us: over four years; longer is clamped */
#define LAT_BUCKETS ((LAT_MAX_BIT - LAT_SUB_BITS + 1) * LAT_SUB + LAT_SUB)

struct latencyHist {
    uint64_t count;
    uint64_t counts[LAT_BUCKETS];
};

static unsigned bucketOf(uint64_t v) {
    if (v < LAT_SUB) return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    if (msb > LAT_MAX_BIT) return LAT_BUCKETS - 1;
    unsigned shift = msb - LAT_SUB_BITS;
    return (shift + 1) * LAT_SUB + (unsigned)((v >> shift) & (LAT_SUB - 1));
}

/* The largest value that falls in bucket b. */
static uint64_t bucketTop(unsigned b) {
    if (b < LAT_SUB) return b;
    unsigned shift = b / LAT_SUB - 1;
    uint64_t base = (uint64_t)(LAT_SUB + b % LAT_SUB) << shift;
    return base + ((UINT64_C(1) << shift) - 1);
}

void latencyRecord(latencyHist **h, uint64_t usec) {
    if (*h == NULL) *h = zcalloc(sizeof(**h));
    (*h)->counts[bucketOf(usec)]++;
    (*h)->count++;
}

double latencyPercentile(const latencyHist *h, double pct) {
    if (h == NULL || h->count == 0) return 0.0;
    uint64_t want = (uint64_t)((pct / 100.0) * (double)h->count + 0.5);
    if (want == 0) want = 1;
    if (want > h->count) want = h->count;
    uint64_t seen = 0;
    for (unsigned b = 0; b < LAT_BUCKETS; b++) {
        seen += h->counts[b];
        if (seen >= want) return (double)bucketTop(b);
    }
    return (double)bucketTop(LAT_BUCKETS - 1);
}

uint64_t latencyCount(const latencyHist *h) { return h ? h->count : 0; }

uint64_t latencyCountBelow(const latencyHist *h, uint64_t usec) {
    if (h == NULL) return 0;
    uint64_t n = 0;
    for (unsigned b = 0; b < LAT_BUCKETS && bucketTop(b) < usec; b++) n += h->counts[b];
    return n;
}

void latencyReset(latencyHist **h) {
    zfree(*h);
    *h = NULL;
}
