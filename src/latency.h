/* latency.h -- per-command latency histograms for INFO latencystats.
 * See latency.c. */
#ifndef LATENCY_H
#define LATENCY_H

#include <stdint.h>

typedef struct latencyHist latencyHist;

/* Records one duration in microseconds, creating *h on first use. */
void latencyRecord(latencyHist **h, uint64_t usec);
/* The duration (us) below which pct percent of the records fall, to the
 * histogram's resolution; 0 if empty. */
double latencyPercentile(const latencyHist *h, double pct);
uint64_t latencyCount(const latencyHist *h);
/* How many records are below usec (a power of two: exact, since no bucket
 * straddles one). */
uint64_t latencyCountBelow(const latencyHist *h, uint64_t usec);
void latencyReset(latencyHist **h);

#endif
