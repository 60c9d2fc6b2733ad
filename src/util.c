/* util.c -- helpers every module needs and none owns.
 *
 * string2ll is deliberately strict (no spaces, no '+', no leading zeros, no
 * overflow): it parses lengths and counts that come off the wire, and a
 * lenient parser is how "0x10" or " 5" sneak past a bounds check.
 *
 * stringmatchlen is a glob matcher (* ? [set] [^set] [a-z] \x) used by KEYS,
 * SCAN MATCH, CONFIG GET and CLIENT KILL. It recurses on '*', so a pattern
 * with many stars is bounded by a nesting limit: a hostile pattern can cost
 * time but cannot blow the stack.
 */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int string2ull(const char *s, size_t slen, unsigned long long *value) {
    if (slen == 0 || slen > 20) return 0;
    if (slen == 1 && s[0] == '0') {
        *value = 0;
        return 1;
    }
    if (s[0] < '1' || s[0] > '9') return 0;
    unsigned long long v = 0;
    for (size_t i = 0; i < slen; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (ULLONG_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *value = v;
    return 1;
}

int string2ll(const char *s, size_t slen, long long *value) {
    if (slen == 0) return 0;
    int negative = 0;
    if (s[0] == '-') {
        negative = 1;
        s++;
        slen--;
        if (slen == 0 || s[0] == '0') return 0; /* "-" and "-0..." */
    }
    unsigned long long v;
    if (!string2ull(s, slen, &v)) return 0;
    if (negative) {
        if (v > (unsigned long long)LLONG_MAX + 1) return 0;
        *value = v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v;
    } else {
        if (v > LLONG_MAX) return 0;
        *value = (long long)v;
    }
    return 1;
}

/* Every reply header ("$64", ":1", "*2") is formatted here, so it avoids
 * snprintf: digits are produced two at a time from a table. Returns the
 * length, or 0 if dst is too small (dst is then left undefined). */
int ll2string(char *dst, size_t dstlen, long long svalue) {
    static const char digits[201] =
        "0001020304050607080910111213141516171819"
        "2021222324252627282930313233343536373839"
        "4041424344454647484950515253545556575859"
        "6061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    char tmp[24];
    char *p = tmp + sizeof(tmp);
    unsigned long long v = svalue < 0 ? 0ULL - (unsigned long long)svalue : (unsigned long long)svalue;
    while (v >= 100) {
        unsigned i = (unsigned)(v % 100) * 2;
        v /= 100;
        *--p = digits[i + 1];
        *--p = digits[i];
    }
    if (v < 10) {
        *--p = (char)('0' + v);
    } else {
        unsigned i = (unsigned)v * 2;
        *--p = digits[i + 1];
        *--p = digits[i];
    }
    if (svalue < 0) *--p = '-';
    size_t n = (size_t)(tmp + sizeof(tmp) - p);
    if (n + 1 > dstlen) return 0;
    memcpy(dst, p, n);
    dst[n] = '\0';
    return (int)n;
}

static int stringmatchlenImpl(const char *p, size_t plen, const char *s, size_t slen, int nocase,
                              int *skipLongerMatches, int nesting) {
    if (nesting > 1000) return 0;
    while (plen && slen) {
        switch (p[0]) {
        case '*':
            while (plen > 1 && p[1] == '*') {
                p++;
                plen--;
            }
            if (plen == 1) return 1;
            while (slen) {
                if (stringmatchlenImpl(p + 1, plen - 1, s, slen, nocase, skipLongerMatches,
                                       nesting + 1))
                    return 1;
                if (*skipLongerMatches) return 0;
                s++;
                slen--;
            }
            /* The rest of the pattern failed against every suffix, so it
             * will fail against shorter ones too: stop all outer stars. */
            *skipLongerMatches = 1;
            return 0;
        case '?':
            s++;
            slen--;
            break;
        case '[': {
            int not, match = 0;
            p++;
            plen--;
            not = plen && p[0] == '^';
            if (not) {
                p++;
                plen--;
            }
            while (plen) {
                if (p[0] == '\\' && plen >= 2) {
                    p++;
                    plen--;
                    if (p[0] == s[0]) match = 1;
                } else if (p[0] == ']') {
                    break;
                } else if (plen >= 3 && p[1] == '-') {
                    int start = (unsigned char)p[0], end = (unsigned char)p[2],
                        c = (unsigned char)s[0];
                    if (start > end) {
                        int t = start;
                        start = end;
                        end = t;
                    }
                    if (nocase) {
                        start = tolower(start);
                        end = tolower(end);
                        c = tolower(c);
                    }
                    p += 2;
                    plen -= 2;
                    if (c >= start && c <= end) match = 1;
                } else if (nocase ? tolower((unsigned char)p[0]) == tolower((unsigned char)s[0])
                                  : p[0] == s[0]) {
                    match = 1;
                }
                p++;
                plen--;
            }
            /* An unterminated set ends where the pattern does, as in Redis:
             * "k[0-1" is "k[0-1]" and "h[^" matches h and any one byte. A
             * client written against Redis (KEYS, SCAN MATCH, PSUBSCRIBE, an
             * ACL key pattern) gets the keys it got there. The loop below
             * must not step past the end: leave plen at 1 for it. */
            if (plen == 0) {
                p--;
                plen++;
            }
            if (not) match = !match;
            if (!match) return 0;
            s++;
            slen--;
            break;
        }
        case '\\':
            if (plen >= 2) {
                p++;
                plen--;
            }
            /* fall through */
        default:
            if (nocase ? tolower((unsigned char)p[0]) != tolower((unsigned char)s[0])
                       : p[0] != s[0])
                return 0;
            s++;
            slen--;
            break;
        }
        p++;
        plen--;
    }
    while (plen && p[0] == '*') {
        p++;
        plen--;
    }
    return plen == 0 && slen == 0;
}

int stringmatchlen(const char *pattern, size_t patternLen, const char *string, size_t stringLen,
                   int nocase) {
    int skip = 0;
    return stringmatchlenImpl(pattern, patternLen, string, stringLen, nocase, &skip, 0);
}

/* "1gb" -> 1073741824. Units as in redis.conf: k/kb/m/mb/g/gb (k=1000, kb=1024),
 * plus t/tb. *err is set on a malformed number or overflow. */
long long memtoll(const char *p, int *err) {
    const char *u;
    char buf[128];
    long long mul;
    size_t len = strlen(p);
    if (err) *err = 0;
    u = p;
    if (*u == '-') u++;
    while (*u && isdigit((unsigned char)*u)) u++;
    if (*u == '\0' || !strcasecmp(u, "b")) mul = 1;
    else if (!strcasecmp(u, "k")) mul = 1000;
    else if (!strcasecmp(u, "kb")) mul = 1024;
    else if (!strcasecmp(u, "m")) mul = 1000 * 1000;
    else if (!strcasecmp(u, "mb")) mul = 1024 * 1024;
    else if (!strcasecmp(u, "g")) mul = 1000LL * 1000 * 1000;
    else if (!strcasecmp(u, "gb")) mul = 1024LL * 1024 * 1024;
    else if (!strcasecmp(u, "t")) mul = 1000LL * 1000 * 1000 * 1000;
    else if (!strcasecmp(u, "tb")) mul = 1024LL * 1024 * 1024 * 1024;
    else goto bad;
    len = (size_t)(u - p);
    if (len == 0 || len >= sizeof(buf)) goto bad;
    memcpy(buf, p, len);
    buf[len] = '\0';
    long long val;
    if (!string2ll(buf, len, &val)) goto bad;
    if (val != 0 && (val > LLONG_MAX / mul || val < LLONG_MIN / mul)) goto bad;
    return val * mul;
bad:
    if (err) *err = 1;
    return 0;
}

void bytesToHuman(char *s, size_t size, unsigned long long n) {
    const char *units = "BKMGTP";
    double d = (double)n;
    int u = 0;
    while (d >= 1024 && u < 5) {
        d /= 1024;
        u++;
    }
    if (u == 0) snprintf(s, size, "%lluB", n);
    else snprintf(s, size, "%.2f%c", d, units[u]);
}

/* The wall clock: what absolute times (key expiries, creation times, the
 * log's records) are in. A relative timeout (a lease, a pending put, an
 * owner's TTL) runs on monoMs() instead, so a wall-clock step (NTP, an
 * operator) neither ends every one of them at once nor stalls them.
 * wallClockOffsetUs moves this clock alone, as a step would (DEBUG
 * WALLCLOCK-STEP, tests). */
long long wallClockOffsetUs;

long long ustime(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000000 + tv.tv_usec + wallClockOffsetUs;
}

long long mstime(void) { return ustime() / 1000; }

long long monoUs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

long long monoMs(void) { return monoUs() / 1000; }

void getRandomBytes(unsigned char *p, size_t len) {
    while (len) {
        ssize_t n = getrandom(p, len, 0);
        if (n <= 0) {
            /* getrandom only fails before the pool is seeded on ancient
             * kernels; time and pid are enough for hash-table seeding. */
            unsigned long long x = (unsigned long long)ustime() ^ ((unsigned long long)getpid() << 32);
            for (size_t i = 0; i < len; i++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                p[i] = (unsigned char)(x >> 56);
            }
            return;
        }
        p += n;
        len -= (size_t)n;
    }
}

void getRandomHexChars(char *p, size_t len) {
    const char *charset = "0123456789abcdef";
    getRandomBytes((unsigned char *)p, len);
    for (size_t j = 0; j < len; j++) p[j] = charset[(unsigned char)p[j] & 0x0F];
}

/* Writes the file whole or not at all: a temporary file beside it, synced,
 * then renamed over it, so a crash leaves the old or the new contents and
 * never a torn one. -1 with errno set on failure (nothing changed). */
/* The rest of fp as one sds (config files, the aclfile: read whole, then
 * split into lines, so a parse error can name its line). */
sds readFileSds(FILE *fp) {
    sds content = sdsempty();
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), fp)) > 0) content = sdscatlen(content, buf, n);
    return content;
}

int writeFileAtomic(const char *path, const void *buf, size_t len) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp-%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    FILE *fp = fopen(tmp, "w");
    if (fp == NULL) return -1;
    /* The new file takes the old one's permissions: these files hold
     * passwords (requirepass, masterauth, ACL users), and one an operator
     * made 0600 must not come back from a rewrite readable by everyone
     * (fopen creates 0666 less the umask). Set before a byte is written,
     * so the temporary file is never readable by more than the old one. */
    struct stat st;
    int keep_mode = stat(path, &st) == 0;
    if ((keep_mode && fchmod(fileno(fp), st.st_mode & 07777) != 0) || fwrite(buf, 1, len, fp) != len ||
        fflush(fp) != 0 || fsync(fileno(fp)) != 0) {
        int saved = errno;
        fclose(fp);
        unlink(tmp);
        errno = saved;
        return -1;
    }
    fclose(fp);
    if (rename(tmp, path) == -1) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
        return -1;
    }
    return 0;
}

/* %g keeps six digits: a percentile given as 99.99999 was shown (CONFIG
 * GET, INFO), rewritten and, when a CONFIG SET was undone, set back as 100
 * -- the maximum, another percentile. 15 digits give back every decimal
 * of up to 15 digits; the rare double that needs more gets 17. */
sds sdscatdouble(sds s, double d) {
    char buf[64];
    snprintf(buf, sizeof(buf), "%.15g", d);
    if (strtod(buf, NULL) != d) snprintf(buf, sizeof(buf), "%.17g", d);
    return sdscat(s, buf);
}

/* ---- base64 ------------------------------------------------------------------ */

static const char base64Chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

sds base64Encode(const char *p, size_t len) {
    const unsigned char *s = (const unsigned char *)p;
    sds out = sdsMakeRoomFor(sdsempty(), (len + 2) / 3 * 4);
    char *o = out;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < len ? (unsigned)s[i + 1] << 8 : 0) | (i + 2 < len ? s[i + 2] : 0);
        *o++ = base64Chars[v >> 18];
        *o++ = base64Chars[(v >> 12) & 63];
        *o++ = i + 1 < len ? base64Chars[(v >> 6) & 63] : '=';
        *o++ = i + 2 < len ? base64Chars[v & 63] : '=';
    }
    sdsIncrLen(out, o - out);
    return out;
}

static int base64Value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

sds base64Decode(const char *s, size_t len) {
    if (len % 4) return NULL;
    sds out = sdsMakeRoomFor(sdsempty(), len / 4 * 3);
    char *o = out;
    for (size_t i = 0; i < len; i += 4) {
        int last = i + 4 == len;
        int pad = last ? (s[i + 3] == '=') + (s[i + 3] == '=' && s[i + 2] == '=') : 0;
        int v[4] = {0, 0, 0, 0};
        for (int k = 0; k < 4 - pad; k++)
            if ((v[k] = base64Value((unsigned char)s[i + k])) < 0) goto err;
        *o++ = (char)((v[0] << 2) | (v[1] >> 4));
        if (pad < 2) *o++ = (char)(((v[1] & 15) << 4) | (v[2] >> 2));
        if (pad < 1) *o++ = (char)(((v[2] & 3) << 6) | v[3]);
    }
    sdsIncrLen(out, o - out);
    return out;
err:
    sdsfree(out);
    return NULL;
}
