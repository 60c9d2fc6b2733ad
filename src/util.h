/* util.h -- small pure helpers: strict number parsing, glob matching, time. */
#ifndef UTIL_H
#define UTIL_H

#include <stddef.h>
#include <stdint.h>

int string2ll(const char *s, size_t slen, long long *value);
int string2ull(const char *s, size_t slen, unsigned long long *value);
int ll2string(char *dst, size_t dstlen, long long svalue);
int stringmatchlen(const char *pattern, size_t patternLen, const char *string, size_t stringLen,
                   int nocase);
long long memtoll(const char *p, int *err);
void bytesToHuman(char *s, size_t size, unsigned long long n);
long long ustime(void);
long long mstime(void);
void getRandomBytes(unsigned char *p, size_t len);
void getRandomHexChars(char *p, size_t len);

#endif
