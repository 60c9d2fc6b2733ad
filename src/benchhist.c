/* benchhist.c -- a log-linear latency histogram with two significant digits.
 *
 * The idea is HdrHistogram's, the code is ours. A value v is split into an
 * exponent e (how far its highest set bit lies above HIST_SUB_BITS) and the
 * top HIST_SUB_BITS+1 bits of v, which select one of HIST_SUB_COUNT linear
 * sub-buckets inside the power-of-two range [2^(e+7), 2^(e+8)). Every
 * bucket is therefore at most 1/128 of its values wide: the error is
 * relative, not absolute, so a 20 us and a 2 s latency are both known to
 * within 0.8 %. Values below 256 get a bucket each (e = 0).
 *
 * Why not a sorted sample array: a run of 10^7 requests would keep 80 MB
 * and sort it; recording here is a count-leading-zeros, a shift and an
 * increment, which is cheap enough to do for every reply, and threads keep
 * one histogram each and merge them at the end (the buckets line up).
 *
 * Bucket layout, with S = HIST_SUB_COUNT = 128:
 *
 *   index  [0, 2S)            value = index                  (e = 0)
 *   index  [(e+1)S, (e+2)S)   value in [sub << e, (sub+1) << e),
 *                             sub = index - eS, in [S, 2S)  (e >= 1)
 */
#include "benchhist.h"

#include <string.h>

static inline unsigned histIndex(uint64_t v) {
    if (v < 2 * HIST_SUB_COUNT) return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned e = msb - HIST_SUB_BITS;
    return e * HIST_SUB_COUNT + (unsigned)(v >> e);
}

/* The highest value that lands in bucket `idx`. */
static uint64_t histBucketTop(unsigned idx) {
    if (idx < 2 * HIST_SUB_COUNT) return idx;
    unsigned e = idx / HIST_SUB_COUNT - 1;
    uint64_t sub = idx - (uint64_t)e * HIST_SUB_COUNT;
    /* sub+1 << e overflows only for the very last bucket. */
    if (sub + 1 == 2 * HIST_SUB_COUNT && e == 64 - HIST_SUB_BITS - 1) return UINT64_MAX;
    return ((sub + 1) << e) - 1;
}

void histReset(hist *h) {
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

void histRecord(hist *h, uint64_t v) {
    h->counts[histIndex(v)]++;
    h->count++;
    if (v < h->min) h->min = v;
    if (v > h->max) h->max = v;
}

void histMerge(hist *dst, const hist *src) {
    if (src->count == 0) return;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) dst->counts[i] += src->counts[i];
    dst->count += src->count;
    if (src->min < dst->min) dst->min = src->min;
    if (src->max > dst->max) dst->max = src->max;
}

uint64_t histPercentile(const hist *h, double p) {
    if (h->count == 0) return 0;
    if (p >= 100.0) return h->max;
    if (p < 0) p = 0;
    /* The rank of the sample we want, 1-based: ceil(p% of count), at least 1. */
    uint64_t rank = (uint64_t)(p / 100.0 * (double)h->count);
    if ((double)rank < p / 100.0 * (double)h->count) rank++;
    if (rank == 0) rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            uint64_t top = histBucketTop(i);
            return top > h->max ? h->max : top;
        }
    }
    return h->max;
}
