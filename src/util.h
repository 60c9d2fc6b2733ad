/* util.h -- small pure helpers: strict number parsing, glob matching, time. */
#ifndef UTIL_H
#define UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "sds.h"

int string2ll(const char *s, size_t slen, long long *value);
int string2ull(const char *s, size_t slen, unsigned long long *value);
int ll2string(char *dst, size_t dstlen, long long svalue);
int stringmatchlen(const char *pattern, size_t patternLen, const char *string, size_t stringLen,
                   int nocase);
long long memtoll(const char *p, int *err);
void bytesToHuman(char *s, size_t size, unsigned long long n);
long long ustime(void);
long long mstime(void);
long long monoMs(void); /* CLOCK_MONOTONIC: for relative timeouts (util.c) */
long long monoUs(void); /* the same, for time budgets and durations */
extern long long wallClockOffsetUs;
/* a + b, clamped to LLONG_MAX / LLONG_MIN: "now + a duration from the
 * user" must never wrap into the past. */
static inline long long addSaturate(long long a, long long b) {
    long long r;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? __LONG_LONG_MAX__ : -__LONG_LONG_MAX__ - 1;
    return r;
}
void getRandomBytes(unsigned char *p, size_t len);
void getRandomHexChars(char *p, size_t len);

/* Standard base64, padded: etcd's []byte fields (as Go's encoding/json
 * writes them) and HTTP Basic credentials. Decode: NULL unless s is whole
 * quads of the alphabet, '=' only at the very end. */
sds base64Encode(const char *p, size_t len);
sds base64Decode(const char *s, size_t len);

/* d in the fewest digits (%.15g, else %.17g) that read back as d. */
sds sdscatdouble(sds s, double d);

sds readFileSds(FILE *fp);
int writeFileAtomic(const char *path, const void *buf, size_t len);

#endif
